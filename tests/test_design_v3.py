"""studies/design_v3.py: benchmark v3's design decisions from constructed design-run files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.store.tracking.runlog import RunLog
from harness.store.trialdir import config_sha256
from studies import design_v3 as design

REPO = Path(__file__).resolve().parents[1]


def _trial(root: Path, delay: int, seed: int, q50: float, over: float, acc: dict[int, float], step_s: float = 1.5,
           wall: float | None = None, algorithm: str = "grpo") -> None:
    config = {"algorithm": algorithm, "delay": delay, "seed": seed}
    log = RunLog(root / f"{algorithm}-d{delay}-s{seed}")
    log.start(config, {}, {"config_sha256": config_sha256(config)})
    for step in range(1, 257):
        late = step > 128          # the second half reads (q50, over); the first half something else
        log.metrics(step, {"is/traj_abs_log_ratio_q50": q50 if late else 9.0,
                           "is/group_over_cap_frac": over if late else 0.0, "perf/step_s": step_s})
    for step, a in acc.items():
        log.eval(step, {"eval/acc": a})
    log.started_at = 1000.0
    log.status("completed", 256)
    if wall is not None:                                   # the trial's wall time, as status.json records it
        status = json.loads((log.dir / "status.json").read_text())
        status["updated_at"] = status["started_at"] + wall
        (log.dir / "status.json").write_text(json.dumps(status))


def _rising_then_flat(flat_from: int) -> dict[int, float]:
    return {s: min(s, flat_from) / 256 * 0.6 + 0.2 for s in range(0, 257, 16)}


def test_regime_budget_and_cut(tmp_path):
    for seed in (9000, 9001):
        _trial(tmp_path, 0, seed, 0.0, 0.0, _rising_then_flat(96), wall=256 * 1.5 + 17 * 4.0)
        _trial(tmp_path, 64, seed, 1.4 + 0.2 * (seed - 9000), 0.45, _rising_then_flat(96), step_s=2.0)
    d = design.decide(tmp_path)
    r = d["regimes"][64]
    assert r["q50"] == pytest.approx(1.5) and r["over"] == pytest.approx(0.45) and r["passes"]   # mean of 1.4, 1.6
    assert d["largest_delay"] == 64 and d["delays"] == [0, 16, 64]
    assert d["budget"]["budget"] == 128 and not d["budget"]["truncated"]      # flat from step 96
    assert d["costs"]["c"] == pytest.approx(2.0) and d["costs"]["e"] == pytest.approx(4.0)
    k = d["cut"]
    tune_s, table_s = 128 * 2.0 + 5 * 4.0, 128 * 2.0 + 5 * 10.0
    assert k["trial_s"] == {"tuning": pytest.approx(tune_s), "table": pytest.approx(table_s)}
    def spent(n, stale):             # §4: 6 lrs x 2 seeds x n + 4 extensions; (stale delays + delay 0) x 8 seeds x n
        return (12 * n + 4) * tune_s + ((stale + 1) * 8 * n) * table_s
    assert spent(4, 2) > design.BUDGET_S >= spent(3, 2)            # below five with delay D/4: it is dropped
    n = len(k["estimators"])
    assert k["stale_delays"] == 1 and n == 5 and spent(5, 1) <= design.BUDGET_S < spent(6, 1)
    assert k["left_s"] == pytest.approx(design.BUDGET_S - spent(5, 1)) and k["side"] == []
    assert k["estimators"] == list(design.ORDER[:n]) and k["estimators"][:2] == ["gmc_grpo", "grpo"]
    assert "passes" in design.describe(d) and "B = 128" in design.describe(d)


def test_missed_regime_takes_the_closest_delay_and_a_rising_curve_is_truncated(tmp_path):
    for seed in (9000, 9001):
        _trial(tmp_path, 0, seed, 0.0, 0.0, _rising_then_flat(256), wall=500.0)
        _trial(tmp_path, 64, seed, 1.2, 0.30, {0: 0.2})          # closeness min(0.8, 0.75) = 0.75
        _trial(tmp_path, 128, seed, 1.4, 0.20, {0: 0.2})         # min(0.93, 0.5) = 0.5
    d = design.decide(tmp_path)
    assert not d["regimes"][64]["passes"] and not d["regimes"][128]["passes"]
    assert d["largest_delay"] == 64
    assert d["budget"]["budget"] == 256 and d["budget"]["truncated"]
    assert "misses" in design.describe(d) and "truncated" in design.describe(d)


def test_slow_steps_drop_the_middle_delay_and_the_side_tables(tmp_path):
    d = design.cut(128, 2.0, 5.0)
    assert d["stale_delays"] == 1 and d["side"] == [] and d["estimators"] == ["gmc_grpo", "grpo", "topr", "tic_grpo"]
    assert "does not fit" not in design.describe_cut(d)
    slow = design.cut(256, 2.5, 5.0)
    assert len(slow["estimators"]) < 3 and "does not fit" in design.describe_cut(slow)


def test_refuses_another_estimator_and_a_missing_run(tmp_path):
    with pytest.raises(SystemExit, match="needs finished grpo trials"):
        design.decide(tmp_path)
    _trial(tmp_path, 0, 9000, 0.0, 0.0, _rising_then_flat(96), algorithm="gmc_grpo")
    with pytest.raises(SystemExit, match="grpo alone"):
        design.decide(tmp_path)


def test_the_committed_decisions_are_read_off_the_committed_raw_files(tmp_path):
    """reports/design-v3/decisions.json is what studies/design_v3.py reads off reports/design-v3/raw.tar.gz."""
    import tarfile
    with tarfile.open(REPO / "reports" / "design-v3" / "raw.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    committed = json.loads((REPO / "reports" / "design-v3" / "decisions.json").read_text())
    again = json.loads(json.dumps(design.decide(tmp_path), default=str))
    assert again == committed
    assert committed["largest_delay"] == 64 and committed["budget"]["budget"] == 128
    assert committed["cut"]["estimators"] == ["gmc_grpo", "grpo", "topr", "tic_grpo", "m2po"]
