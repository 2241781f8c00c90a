"""The two trajectory-level families the lab's claims are about, read from an estimator's registry family.

The GMC-GRPO paper's claims compare *kinds* of trajectory-level importance weights, not two named
estimators, so the lab judges every estimator of a kind by the same rule (a plugin included):

- **group rescaling** (`correction: group-cap`): one factor per group scales every trajectory ratio r_i,
  so that the group's mass is capped (gmc_grpo).
- **trajectory clipping** (`correction: sequence-is`): each trajectory's own ratio r_i is weighted, clipped
  or truncated on its own (tic_is, tic_grpo, tis_seq, topr, gspo, mis_seq, geo_mean).

Everything else (token-level corrections, no correction, "unspecified") is in neither and is only shown.
The family travels with the stored sweeps (sweeps.py writes `families` from the registry when the suite
runs), so this module and the report read plain strings and never import the estimators.

    kind_of({"trust_region": "none", "correction": "group-cap", ...})   # -> "group rescaling"
"""
from __future__ import annotations

import math
from typing import Any, Mapping

RESCALING = "group rescaling"
CLIPPING = "trajectory clipping"
KINDS = {"group-cap": RESCALING, "sequence-is": CLIPPING}     # registry `correction` -> the claims' kind


def kind_of(family: Mapping[str, Any] | None) -> str | None:
    """The claims' kind of an estimator's registry family (RESCALING, CLIPPING), or None for neither."""
    return KINDS.get(str((family or {}).get("correction", "")))


def members(families: Mapping[str, Mapping[str, Any]], kind: str) -> list[str]:
    """The estimators of `families` (name -> registry family) of that kind, sorted."""
    return sorted(name for name, fam in families.items() if kind_of(fam) == kind)


def kinds(data: dict[str, Any]) -> dict[str, list[str]]:
    """{RESCALING: [...], CLIPPING: [...]}: the swept estimators of each trajectory-level kind."""
    fams = data.get("families", {})
    swept = {r["estimator"] for r in data["by_g"]} | {r["estimator"] for r in data["by_eps"]}
    return {kind: [n for n in members(fams, kind) if n in swept] for kind in (RESCALING, CLIPPING)}


def kind_label(data: dict[str, Any], name: str) -> str:
    for kind, names in kinds(data).items():
        if name in names:
            return kind
    return "neither"


def g_reading(kind: str, fits: list[dict[str, Any]]) -> str:
    """One estimator's reading of its bias-vs-G fits (one per divergence) under its kind's rule of claim 4:
    rescaling: "vanishes" (every CI below 0), "contradicts" (some CI above 0); clipping: "persists" (every
    CI above −0.25), "decays" (some CI below −0.5); otherwise "unresolved" (also with no fitted divergence)."""
    ok = [f for f in fits if math.isfinite(f["slope"])]
    if not ok:
        return "unresolved"
    if kind == RESCALING:
        if any(f["lo"] > 0 for f in ok):
            return "contradicts"
        return "vanishes" if all(f["hi"] < 0 for f in ok) else "unresolved"
    if any(f["hi"] < -0.5 for f in ok):
        return "decays"
    return "persists" if all(f["lo"] > -0.25 for f in ok) else "unresolved"
