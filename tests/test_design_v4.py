"""studies/design_v4.py: benchmark v4's largest delay from constructed design-run files (docs/benchmark-v4.md §3)."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.store.tracking.runlog import RunLog
from harness.store.trialdir import config_sha256
from studies import design_v4 as design

REPO = Path(__file__).resolve().parents[1]


def _trial(root: Path, lr: float, delay: int, capped: float, steps: int = 8) -> None:
    config = {"algorithm": "gmc_grpo", "delay": delay, "seed": 9000, "train": {"lr": lr}}
    log = RunLog(root / f"d{delay}-lr{lr}-s9000")
    log.start(config, {}, {"config_sha256": config_sha256(config)})
    for step in range(1, steps + 1):
        late = step > steps / 2          # only the second half counts; the first half reads 1.0
        log.metrics(step, {"gmc/capped_frac": capped if late else 1.0, "is/group_over_cap_frac": capped,
                           "is/traj_abs_log_ratio_q50": 0.5, "policy/kl_behavior": 0.01})
    log.status("completed", steps)


def test_the_smallest_delay_where_the_cap_binds_at_the_nearest_design_lr(tmp_path):
    for lr, shares in ((1e-5, (0.02, 0.05, 0.10)), (3.981e-5, (0.08, 0.16, 0.22)), (1.585e-4, (0.2, 0.2, 0.2))):
        for delay, capped in zip((64, 128, 256), shares):
            _trial(tmp_path, lr, delay, capped)
    by = design.load(tmp_path)
    # η* = 5e-5 is nearest 3.981e-5 in log (|log 1.256| < |log 3.17|): binds first at delay 128 (16% ≥ 15%).
    d = design.decide(by, 5e-5)
    assert d["read_at_lr"] == 3.981e-5 and d["largest_delay"] == 128 and d["delays"] == [0, 32, 128]
    assert d["cap_binds"] and d["capped_at_largest"] == pytest.approx(0.16)
    # η* = 1e-5: the cap never binds in 15%; D is the delay where it binds most, and the shortfall is flagged.
    d = design.decide(by, 1e-5)
    assert d["largest_delay"] == 256 and not d["cap_binds"]
    assert "no candidate meets the rule" in design.describe(d)
    # The map alone: every cell's second-half means.
    cells = design.decide(by, None)["cells"]
    assert len(cells) == 9 and [c["capped"] for c in cells if c["lr"] == 1.585e-4] == [pytest.approx(0.2)] * 3


def test_a_trial_of_another_estimator_is_refused(tmp_path):
    config = {"algorithm": "grpo", "delay": 64, "seed": 9000, "train": {"lr": 1e-5}}
    log = RunLog(tmp_path / "grpo-d64")
    log.start(config, {}, {"config_sha256": config_sha256(config)})
    log.metrics(1, {"gmc/capped_frac": 0.1})
    log.status("completed", 1)
    with pytest.raises(SystemExit, match="gmc_grpo alone"):
        design.load(tmp_path)
