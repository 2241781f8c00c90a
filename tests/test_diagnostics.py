"""Per-token importance diagnostics: hand-computed on a 4 × 2 batch, the histogram bins, and the trial's
is_hist.jsonl rows."""
from __future__ import annotations

import math

import pytest
import torch

from harness.store import trialdir
from harness.trial.metrics import HIST_BINS, add_histograms, combine_metrics, importance_diagnostics

from test_trainer import run


def test_diagnostics_by_hand():
    # rows 0, 1 are group 0 (A = +1), rows 2, 3 group 1 (A = −1); row 3's second token is padding.
    # ε = 0.2: a token is clipped when A > 0 and λ > log 1.2 = 0.182, or A < 0 and λ < log 0.8 = −0.223.
    lam = torch.tensor([[0.3, 0.0], [-0.5, 0.1], [-0.3, 0.5], [0.2, 9.0]])
    mask = torch.tensor([[1, 1], [1, 1], [1, 1], [1, 0]], dtype=torch.bool)
    entropy = torch.tensor([[1.0, 7.0], [7.0, 7.0], [3.0, 7.0], [7.0, 7.0]])
    adv, groups = torch.tensor([1.0, 1.0, -1.0, -1.0]), torch.tensor([0, 0, 1, 1])
    out, hist = importance_diagnostics(lam, torch.zeros(4, 2), mask, entropy, adv, groups, eps=0.2)
    # clipped: (0, 0) with λ = 0.3 > 0.182 (A > 0) and (2, 0) with λ = −0.3 < −0.223 (A < 0)
    assert out["is/adv_pos_clipped_frac"] == pytest.approx(1 / 4)          # 1 of the 4 tokens with A > 0
    assert out["is/adv_neg_clipped_frac"] == pytest.approx(1 / 3)          # 1 of the 3 valid tokens with A < 0
    assert out["is/clipped_entropy"] == pytest.approx((1.0 + 3.0) / 2)
    assert hist["clipped_by_position"] == [2, 0] and hist["tokens_by_position"] == [4, 3]
    # valid λ sorted: −0.5, −0.3, 0, 0.1, 0.2, 0.3, 0.5 (7 values): median 0.1; q10 at position 0.1·6 = 0.6:
    # −0.5 + 0.6·(−0.3 − (−0.5)) = −0.38; q99 at 5.94: 0.3 + 0.94·0.2 = 0.488
    assert out["is/log_ratio_q50"] == pytest.approx(0.1, abs=1e-6)
    assert out["is/log_ratio_q10"] == pytest.approx(-0.38, abs=1e-6)
    assert out["is/log_ratio_q99"] == pytest.approx(0.488, abs=1e-6)
    # group ESS (Σw)² / (G Σw²), w = e^Λ: group 0 Λ = 0.3, −0.4; group 1 Λ = 0.2, 0.2 -> 1
    w = [math.exp(0.3), math.exp(-0.4)]
    ess0 = sum(w) ** 2 / (2 * sum(x * x for x in w))
    assert out["is/group_ess_min"] == pytest.approx(ess0, abs=1e-6)
    assert out["is/group_ess_mean"] == pytest.approx((ess0 + 1) / 2, abs=1e-6)
    assert sum(hist["log_ratio_counts"]) == 7 and len(hist["log_ratio_counts"]) == HIST_BINS + 2
    # the trajectory regime: Λ = 0.3, −0.4, 0.2, 0.2; |Λ| sorted 0.2, 0.2, 0.3, 0.4: median 0.25, q90 at
    # position 2.7: 0.3 + 0.7·0.1 = 0.37; ESS (Σr)²/(4 Σr²); group 0's mass e^0.3 + e^−0.4 = 2.02 and group 1's
    # 2 e^0.2 = 2.44, against the cap G(1 + ε) = 2.4: only group 1 is over it
    r = [math.exp(0.3), math.exp(-0.4), math.exp(0.2), math.exp(0.2)]
    assert out["is/traj_abs_log_ratio_q50"] == pytest.approx(0.25) and out["is/traj_abs_log_ratio_max"] == pytest.approx(0.4)
    assert out["is/traj_abs_log_ratio_q90"] == pytest.approx(0.37)
    assert out["is/traj_ess_frac"] == pytest.approx(sum(r) ** 2 / (4 * sum(x * x for x in r)))
    assert out["is/group_over_cap_frac"] == 0.5


def test_histogram_bins_and_tails():
    # bins of width 0.1 from −4: 0.05 is in [0, 0.1), bin 40, counts index 41; −3.95 in bin 0 (index 1);
    # 4.5 above 4 (last index); −10 below −4 (index 0)
    lam = torch.tensor([[0.05, -3.95, 4.5, -10.0]])
    _, hist = importance_diagnostics(lam, torch.zeros(1, 4), torch.ones(1, 4, dtype=torch.bool), torch.zeros(1, 4),
                                     torch.zeros(1), torch.zeros(1, dtype=torch.long), eps=0.2)
    counts = hist["log_ratio_counts"]
    assert [i for i, c in enumerate(counts) if c] == [0, 1, 41, HIST_BINS + 1]
    both = add_histograms(hist, {"log_ratio_counts": counts, "clipped_by_position": [1], "tokens_by_position": [1]})
    assert both["tokens_by_position"] == [2, 1, 1, 1] and sum(both["log_ratio_counts"]) == 8


def test_combine_metrics_averages_a_key_over_the_parts_that_have_it():
    # is/clipped_entropy only in the first update: its value, not half of it; a/x in both: 0.5·1 + 0.5·3
    parts = [(0.5, {"a/x": 1.0, "is/clipped_entropy": 4.0}), (0.5, {"a/x": 3.0})]
    assert combine_metrics(parts) == {"a/x": 2.0, "is/clipped_entropy": 4.0}


def test_a_trial_writes_one_histogram_row_per_step(tiny_base, tmp_path):
    base = {**tiny_base, "model": {"kind": "tiny"}}
    _, rows, _ = run(base, tmp_path, delay=2, **{"train.passes": 2})
    hist = trialdir.read_side_rows(tmp_path / "t", trialdir.IS_HIST)
    assert [h["step"] for h in hist] == [r["step"] for r in rows]
    for h, r in zip(hist, rows):                      # k = 2 updates, each counts every response token
        tokens = round(r["rollout/len_mean"] * 16)  # B = 16 responses
        assert sum(h["log_ratio_counts"]) == sum(h["tokens_by_position"]) == 2 * tokens
        q = [r[f"is/log_ratio_q{p}"] for p in ("01", "10", "50", "90", "99")]
        assert q == sorted(q)
    assert any(r["is/log_ratio_q99"] > 0 for r in rows[2:])      # stale batches move the ratios
