"""Collapse detection: explicit, documented rules applied to one trial's curves.

A trial is *collapsed* at the earliest step at which any enabled rule fires. The two accuracy rules judge
where the run *ends* against the evaluation's own noise: an evaluation of n problems at accuracy p has the
binomial standard error sqrt(p (1 - p) / n), and the difference of two evaluations a and b (independent
evaluations' errors add in variance) has se(a, b) = sqrt(a (1 - a) / n + b (1 - b) / n). With k = ``k_se``
(default 3):

1. ``below_start``: the last evaluation e lies more than k se(s, e) below the run's start s (its first
   evaluation, the base's accuracy).
2. ``gain_lost``: the run gained g = b - s > k se(b, s) (b its best evaluation) and gave back more than
   ``gain_lost_frac`` (default half) of it, e < b - ``gain_lost_frac`` g, by more than noise:
   b - e > k se(b, e). (The best of many evaluations is biased upward by their noise, so without the
   last condition a modest real gain followed by a plateau "gives back half" on noise alone.)

A rule is judged at the end of the run; its collapse step is the first evaluation of the last unbroken run
of evaluations that meet its condition (the condition at evaluation t uses the best so far). A dip the
run recovers from is not a collapse. A trial whose evaluation size is unknown (neither ``eval/n`` in
eval.jsonl nor an eval size in config.yaml) is not judged by these two rules.

3. ``nonfinite_loss``: ``loss/value`` is NaN or +-inf at some step.
4. ``status_diverged``: the runner marked the trial ``diverged`` (at ``diverged_step``, else at its last
   step).
5. ``entropy``: ``policy/entropy`` lies outside [``entropy_min``, ``entropy_max``] for ``patience``
   consecutive steps (off by default: 0 .. inf); the collapse step is the first step of the streak.
6. ``ratio_max``: ``is/ratio_max`` exceeds ``ratio_max_bound`` at some step (off by default: None).

Rules are set per suite in suite.yaml under ``report: {collapse: {...}}`` (see ``CollapseRules``);
docs/report.md explains the defaults and why k = 3.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.config.collapse import CollapseRules


@dataclass(frozen=True)
class Collapse:
    """Outcome for one trial: whether and when it collapsed, and the rule that fired first."""

    collapsed: bool
    step: int | None
    reason: str  # rule name, "" when not collapsed


def first_streak_start(mask: np.ndarray, patience: int) -> int | None:
    """Index where the first run of at least ``patience`` consecutive True values starts, else None."""
    mask = np.asarray(mask, dtype=bool)
    if mask.size < patience:
        return None
    # Running count of Trues in each window of length `patience`; a full window is a streak.
    windows = np.convolve(mask.astype(np.int64), np.ones(patience, dtype=np.int64), mode="valid")
    hits = np.flatnonzero(windows == patience)
    return int(hits[0]) if hits.size else None


def tail_streak_start(mask: np.ndarray, min_length: int) -> int | None:
    """Start of the run of True values that reaches the end of ``mask``, if at least ``min_length`` long."""
    mask = np.asarray(mask, dtype=bool)
    false = np.flatnonzero(~mask)
    start = int(false[-1]) + 1 if false.size else 0
    return start if mask.size - start >= min_length and start < mask.size else None


def binomial_se(p: np.ndarray, n: float) -> np.ndarray:
    """sqrt(p (1 - p) / n), the standard error of an accuracy p measured on n problems; p is clipped to
    [1/(2n), 1 - 1/(2n)] so that an accuracy of exactly 0 or 1 still has an error (half a problem)."""
    q = np.clip(np.asarray(p, dtype=float), 0.5 / n, 1 - 0.5 / n)
    return np.sqrt(q * (1 - q) / n)


def difference_se(a: np.ndarray, b: np.ndarray, n: float) -> np.ndarray:
    """Standard error of the difference of two independent evaluations a and b of n problems each."""
    return np.hypot(binomial_se(a, n), binomial_se(b, n))


def accuracy_conditions(rules: CollapseRules, acc: np.ndarray, n: float) -> dict[str, np.ndarray]:
    """Per evaluation (E,), whether each accuracy rule's condition holds there (NaN evaluations: False):
    below_start: s - acc > k se(s, acc); gain_lost: best - s > k se(best, s), acc < best - frac (best - s)
    and best - acc > k se(best, acc), with ``best`` the best evaluation so far and n the evaluation size."""
    acc = np.asarray(acc, dtype=float)
    start = acc[0]
    best = np.fmax.accumulate(acc)  # running best, ignoring NaN evaluations
    gain = best - start
    with np.errstate(invalid="ignore"):
        return {
            "below_start": start - acc > rules.k_se * difference_se(start, acc, n),
            "gain_lost": (gain > rules.k_se * difference_se(best, start, n))
                         & (acc < best - rules.gain_lost_frac * gain)
                         & (best - acc > rules.k_se * difference_se(best, acc, n)),
        }


def _accuracy_candidates(rules: CollapseRules, eval_steps: np.ndarray, acc: np.ndarray, n: float | None
                         ) -> list[tuple[int, str]]:
    """(collapse step, reason) of each accuracy rule whose condition holds at the last evaluation: the
    step is the first evaluation of the unbroken stretch of evaluations that reaches the end."""
    keep = ~np.isnan(acc)
    eval_steps, acc = eval_steps[keep], acc[keep]
    if acc.size < 2 or n is None or not n >= 1:
        return []
    out = []
    for name, mask in accuracy_conditions(rules, acc, float(n)).items():
        i = tail_streak_start(mask, 1)
        if i is not None:
            out.append((int(eval_steps[i]), name))
    return out


def detect_collapse(
    rules: CollapseRules,
    eval_steps: np.ndarray,
    acc: np.ndarray,
    metric_steps: np.ndarray,
    nonfinite_loss: np.ndarray,
    entropy: np.ndarray,
    ratio_max: np.ndarray,
    status: str,
    diverged_step: int | None = None,
    last_step: int | None = None,
    eval_size: float | None = None,
) -> Collapse:
    """Apply ``rules`` to one trial.

    ``eval_steps``/``acc``: the eval curve (E,). ``metric_steps``/``nonfinite_loss``/``entropy``/
    ``ratio_max``: per-step metrics (S,), NaN where a metric was not logged; ``nonfinite_loss`` is True
    where ``loss/value`` was logged as NaN or +-inf. ``status``/``diverged_step``/``last_step`` come
    from status.json; ``eval_size``: problems per evaluation (None: the accuracy rules are not judged).
    """
    candidates = _accuracy_candidates(rules, np.asarray(eval_steps), np.asarray(acc, dtype=float), eval_size)
    bad = np.flatnonzero(np.asarray(nonfinite_loss, dtype=bool))
    if bad.size:
        candidates.append((int(metric_steps[bad[0]]), "nonfinite_loss"))
    if status == "diverged":
        step = diverged_step if diverged_step is not None else last_step
        candidates.append((int(step) if step is not None else 0, "status_diverged"))
    entropy = np.asarray(entropy, dtype=float)
    outside = (entropy < rules.entropy_min) | (entropy > rules.entropy_max)
    i = first_streak_start(outside, rules.patience)
    if i is not None:
        candidates.append((int(metric_steps[i]), "entropy"))
    if rules.ratio_max_bound is not None:
        over = np.flatnonzero(np.asarray(ratio_max, dtype=float) > rules.ratio_max_bound)
        if over.size:
            candidates.append((int(metric_steps[over[0]]), "ratio_max"))
    if not candidates:
        return Collapse(False, None, "")
    step, reason = min(candidates, key=lambda c: c[0])  # earliest; ties keep the rule order above
    return Collapse(True, step, reason)


def collapse_rate(collapsed: np.ndarray) -> float:
    """Fraction of trials that collapsed; NaN for no trials."""
    collapsed = np.asarray(collapsed, dtype=bool)
    return float(collapsed.mean()) if collapsed.size else float("nan")


def median_steps_to_collapse(collapse_steps: np.ndarray) -> float:
    """Median collapse step over the trials that collapsed (NaN entries = never); NaN if none did."""
    steps = np.asarray(collapse_steps, dtype=float)
    steps = steps[~np.isnan(steps)]
    return float(np.median(steps)) if steps.size else float("nan")


def survival_curve(collapse_steps: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Fraction of trials not yet collapsed at each step of ``grid`` (G,).

    ``collapse_steps`` (N,) holds each trial's collapse step, NaN for never. A trial that collapses at
    step s counts as collapsed from s on.
    """
    steps = np.asarray(collapse_steps, dtype=float)[:, None]  # (N, 1)
    grid = np.asarray(grid, dtype=float)[None, :]  # (1, G)
    alive = np.isnan(steps) | (steps > grid)  # (N, G)
    return alive.mean(axis=0) if steps.size else np.full(grid.shape[1], np.nan)
