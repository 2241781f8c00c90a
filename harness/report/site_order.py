"""The order of `stalebench site`: the current reference first, then the earlier references, then each
reference's companions, then the studies — read from the reports themselves, never from the alphabet.

- A **reference** is a report of a suite named ``reference`` or ``reference-v<N>`` (the leaderboard of
  benchmark v<N>; v1 is plain ``reference``). References are ordered by the start of their runs
  (``provenance.started_utc`` in results.json), newest first: the newest is the current one.
- A **companion** is a report of a suite named ``<reference>-<part>`` (``reference-v3-bridge``): it follows
  the references, grouped under its reference in the references' order, its runs' start date within.
- Everything else (``design-v3``, a study's parts such as ``claims/eps``) is a **study**, newest runs first.
  A report whose results.json cannot be read sorts last.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

_REFERENCE = re.compile(r"^reference(-v(\d+))?$")


def _reference_of(name: str, references: list[str]) -> str | None:
    """The reference whose companion ``name`` is (the longest ``<reference>-`` prefix), or None."""
    owners = [r for r in references if name.startswith(r + "-")]
    return max(owners, key=len) if owners else None


def site_order(entries: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``entries`` (one per report: ``suite``, ``started`` — the first run's start, a sortable UTC string —
    and ``error``) in the site's order, each with the ``group`` heading it is listed under."""
    readable = [e for e in entries if not e.get("error")]
    references = sorted((e for e in readable if _REFERENCE.match(str(e["suite"]))),
                        key=lambda e: str(e.get("started") or ""), reverse=True)
    rank = {str(e["suite"]): i for i, e in enumerate(references)}
    out = [dict(e, group="The current reference" if i == 0 else "Earlier references")
           for i, e in enumerate(references)]
    companions, studies = [], []
    for e in readable:
        if str(e["suite"]) in rank:
            continue
        owner = _reference_of(str(e["suite"]), list(rank))
        (companions if owner else studies).append((owner, e))
    companions.sort(key=lambda oe: (rank[oe[0]], str(oe[1].get("started") or "")))
    out += [dict(e, group=f"Companions of {owner}") for owner, e in companions]
    studies.sort(key=lambda oe: str(oe[1].get("started") or ""), reverse=True)
    out += [dict(e, group="Studies") for _, e in studies]
    return out + [dict(e, group="Unreadable reports") for e in entries if e.get("error")]
