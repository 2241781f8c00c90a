"""Estimator families and coincidences for the report's tables, read from result files only.

Each trial's provenance.json carries its estimator's family ("estimator": trust_region, correction, reads),
written when the trial ran (harness/trial/lifecycle.py, from the registry); results/<suite>/coincidences.json (harness/
coincidences.py) lists the estimators whose gradients coincide in the suite's regime. The report never
imports the estimators: older trials without the record show no family.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from harness.suite import coincidences
from harness.report.load import SuiteResults


def families(res: SuiteResults) -> dict[str, str]:
    """algorithm -> "trust region / correction / reads", from the trials' provenance."""
    out: dict[str, str] = {}
    algorithm = dict(zip(res.trials["trial_id"], res.trials.get("algorithm", pd.Series(dtype=object))))
    for tid, prov in res.provenance.items():
        est: Any = (prov or {}).get("estimator")
        name = algorithm.get(tid)
        if isinstance(est, dict) and isinstance(name, str) and name not in out:
            out[name] = " / ".join(str(est.get(k, "unspecified")) for k in ("trust_region", "correction", "reads"))
    return out


def annotate(df: pd.DataFrame, res: SuiteResults) -> pd.DataFrame:
    """`df` (cells or leaderboard rows, with an `algorithm` column) plus `family` and `coincides_with`: the
    other estimators whose gradients equal this one's in the suite's regime (labelled as in coincidences.json:
    the name, with its varying ε or parameters when the suite runs several configurations of it)."""
    if "algorithm" not in df.columns:
        return df
    fam = families(res)
    same = coincidences.read(res.path)

    def coinciding(r: dict[str, Any]) -> str:
        label = str(r["algorithm"])
        hits = same.get(label) or [x for k, v in same.items() if k.split(" ")[0] == label for x in v]
        return ", ".join(sorted(set(hits))) if hits else ""

    rows = df.to_dict(orient="records")
    return df.assign(family=[fam.get(str(r["algorithm"]), "") for r in rows],
                     coincides_with=[coinciding(r) for r in rows])
