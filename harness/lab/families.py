"""The two trajectory-level kinds of importance weight the lab sweeps, read from an estimator's registry family.

The lab compares *kinds* of trajectory-level importance weights, not two named estimators, so every
estimator of a kind is swept and read alike (a plugin included; a study judges a kind by one rule:
studies/lab_verdicts.py):

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

from typing import Any, Mapping

RESCALING = "group rescaling"
CLIPPING = "trajectory clipping"
KINDS = {"group-cap": RESCALING, "sequence-is": CLIPPING}     # registry `correction` -> the kind


def kind_of(family: Mapping[str, Any] | None) -> str | None:
    """The kind of an estimator's registry family (RESCALING, CLIPPING), or None for neither."""
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
