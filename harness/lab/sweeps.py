"""Fixed-policy sweeps of an estimator-lab suite: bias vs G, bias vs ε (with the δ_rescale ≤ δ_clip check),
bias vs divergence. `stalebench run` computes them after the suite's trials (`store_sweeps`) into
<results>/<suite>/lab/sweeps.json (sweep_file.py); the report only reads that file.

These are not suite trials: each point is one `estimate.measure` on a fixed (behavior, current) pair:
the pair is exact, the biases are Monte Carlo with standard errors. In the G and ε sweeps (the ones
fitted) a point is re-measured on 4× as many groups (a fresh seed) while a focus estimator's bias has an
SE above 1/3 of its value (`RESOLVE`), up to lab.sweep_max_groups; each row records its `n_groups`.
The G and ε sweeps measure the suite's estimators of the two trajectory-level kinds the claims compare
(families.py: group rescaling, trajectory clipping; chosen by registry family, never by name), and the
stored data carries every estimator's family so a reader can group each by its kind.
A draw is one batch of `batch_groups` groups (the suite's train.prompts_per_step), as in training. The pair: π_θ = θ_0 of the suite's problem (lab.problem_seed, default 0),
π_b = θ_0 perturbed to KL(π_b ‖ π_θ) = kl (policy.perturb_to_kl). The G sweep runs at every KL of
`g_kls(lab)` (the suite's lab.kl and two fixed ones) because the fitted slope depends on the divergence.

    data = run_sweeps(lab, eps=0.2, algorithms=[...], adv_mode="mean", aggregation="token-mean", batch_groups=4)

returns plain JSON-able data (report.py renders it without torch):
    {"config": {...}, "families": {name: family}, "by_g": [row...], "by_eps": [row...], "by_kl": [row...],
     "delta": [row...]}
    row = {"kl", "G", "eps", "estimator", <summarize() fields>, "pair_kl", "pair_chi2"}.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterable

import torch

from algorithms import LossInputs, describe, prepare_context, uses_eps

from harness.config.dicts import from_dict
from harness.lab import estimate, policy
from harness.lab.families import CLIPPING, RESCALING, kind_of, members
from harness.config.lab import LabConfig
from harness.lab.sweep_file import SWEEP_FILE, read_sweeps, suite_sweep_inputs, write_sweeps

EPS_GRID = (0.05, 0.1, 0.2, 0.4, 0.8)        # the ε range
KL_GRID = (0.05, 0.1, 0.2, 0.5, 1.0)         # nats, KL(π_b ‖ π_θ)
RESOLVE = 3.0                                # re-measure while bias < RESOLVE · SE (SE comparable to the value)


def store_sweeps(results_dir: Path) -> str | None:
    """Compute the sweeps of the suite in `results_dir` (its suite.yaml) and store them, unless
    lab/sweeps.json already holds them for the same inputs. Returns a line for the console, or None for a
    suite without a `lab:` base config."""
    inputs = suite_sweep_inputs(results_dir)
    if inputs is None:
        return None
    if read_sweeps(results_dir, inputs)[0] is not None:
        return f"lab: fixed-policy sweeps up to date in {Path(results_dir) / SWEEP_FILE}"
    lab = from_dict(LabConfig, inputs["lab"], "base.lab")
    lab.validate("base.lab")
    data = run_sweeps(lab, eps=inputs["eps"], algorithms=inputs["algorithms"], adv_mode=inputs["adv_mode"],
                      aggregation=inputs["aggregation"], params=inputs["params"], batch_groups=inputs["batch_groups"])
    path = write_sweeps(results_dir, inputs, data)
    return f"lab: fixed-policy sweeps computed in {data['config']['seconds']} s -> {path}"


def g_kls(lab: LabConfig) -> list[float]:
    """The divergences of the G sweep: the suite's lab.kl plus 0.2 and 1.0 nats."""
    return sorted({round(lab.kl, 6), 0.2, 1.0})


def _pair(problem: policy.Problem, theta0: torch.Tensor, kl: float, seed: int) -> estimate.Pair:
    return estimate.Pair.build(problem, theta0, policy.perturb_to_kl(problem, theta0, kl, seed))


def _rows(res: dict[str, Any], **keys: float) -> list[dict[str, Any]]:
    pair = res["pair"]
    return [{**keys, "estimator": name, **vals, "pair_kl": pair["kl_behavior"], "pair_chi2": pair["chi2"]}
            for name, vals in res.items() if name != "pair"]


def trajectory_weight(name: str, inp: LossInputs, eps: float) -> torch.Tensor | None:
    """The estimator's detached per-trajectory weight w_i (its batch context's "weight"), or None when it
    exposes none (its weight lives inside the loss)."""
    return prepare_context(name, inp, eps=eps).tensors.get("weight")


def distortion_check(pair: estimate.Pair, G: int, n_groups: int, eps: float, seed: int, rescaler: str,
                     clipper: str) -> dict[str, float | str] | None:
    """δ(w) = max_i |1 − w_i/r_i| per group for a group rescaler's and a trajectory clipper's weights.

    The proposition in algorithms/gmc_grpo.py: a uniform rescaling of the group has δ = (1 − Σ_i w_i / S)_+
    (S = Σ_i r_i; for GMC's cap C = G(1+ε) that is (1 − C/S)_+), and it is ≤ the clipper's δ on every group.
    None when either estimator exposes no per-trajectory weight.
    """
    gen = torch.Generator().manual_seed(int(seed))
    seqs = policy.sample(pair.problem, pair.theta_b, n_groups * G, gen).view(n_groups, G)
    inp = estimate.loss_inputs(pair, seqs, "mean")
    log_r = (inp.logp - inp.logp_behavior).sum(1)                                 # (B,) Λ_i
    w_cap, w_clip = trajectory_weight(rescaler, inp, eps), trajectory_weight(clipper, inp, eps)
    if w_cap is None or w_clip is None:
        return None

    def delta(w: torch.Tensor) -> torch.Tensor:
        return (1 - torch.exp(torch.log(w.to(log_r.dtype)) - log_r)).abs().view(n_groups, G).max(1).values

    d_cap, d_clip = delta(w_cap), delta(w_clip)
    S = torch.exp(log_r).view(n_groups, G).sum(1)
    formula = (1 - w_cap.to(log_r.dtype).view(n_groups, G).sum(1) / S).clamp_min(0)   # (1 − Σw/S)_+
    return {"rescaler": rescaler, "clipper": clipper, "G": float(G), "eps": eps, "n_groups": float(n_groups),
            "delta_rescale_mean": float(d_cap.mean()), "delta_clip_mean": float(d_clip.mean()),
            "delta_rescale_max": float(d_cap.max()), "delta_clip_max": float(d_clip.max()),
            "holds_frac": float((d_cap <= d_clip + 1e-9).double().mean()),
            "formula_err_max": float((d_cap - formula).abs().max()),
            "capped_frac": float((formula > 0).double().mean())}


def families_of(algorithms: Iterable[str]) -> dict[str, dict[str, object]]:
    """name -> the registry's family axes plus `uses_eps`, as plain data stored with the sweeps."""
    return {n: {**{k: describe(n)[k] for k in ("trust_region", "correction", "reads")}, "uses_eps": uses_eps(n)}
            for n in sorted(set(algorithms))}


def run_sweeps(lab: LabConfig, *, eps: float, algorithms: Iterable[str], adv_mode: str, aggregation: str,
               params: dict[str, dict[str, object]] | None = None, batch_groups: int = 1, seed: int = 0,
               threads: int = 1) -> dict[str, Any]:
    """All sweeps, on `threads` torch threads (restored afterwards): these small ops run fastest on one."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _run_sweeps(lab, eps=eps, algorithms=algorithms, adv_mode=adv_mode, aggregation=aggregation,
                           params=params or {}, batch_groups=batch_groups, seed=seed)
    finally:
        torch.set_num_threads(previous)


def _run_sweeps(lab: LabConfig, *, eps: float, algorithms: Iterable[str], adv_mode: str, aggregation: str,
                params: dict[str, dict[str, object]], batch_groups: int, seed: int) -> dict[str, Any]:
    start = time.perf_counter()
    pseed = 0 if lab.problem_seed is None else lab.problem_seed
    problem = policy.make_problem(lab.vocab, lab.length, lab.reward, lab.reward_frac, pseed)
    theta0 = policy.init_logits(problem, lab.init_scale, pseed)
    common = dict(adv_mode=adv_mode, aggregation=aggregation, batch_groups=batch_groups,
                  max_loop_groups=lab.loop_groups)

    def spec(name: str, e: float) -> estimate.Spec:
        return estimate.Spec(name, e, tuple(sorted(params.get(name, {}).items())))

    point = 0

    def next_seed() -> int:
        nonlocal point
        point += 1
        return seed * 100_003 + point

    def resolved(pair: estimate.Pair, specs: dict[str, estimate.Spec], G: int, **kw: Any) -> dict[str, Any]:
        """measure(), re-run on 4× the groups while a bias's SE exceeds 1/RESOLVE of it (module docstring)."""
        n = lab.sweep_groups
        while True:
            res = estimate.measure(pair, specs, G=G, n_groups=n, seed=next_seed(), **kw, **common)
            if n >= lab.sweep_max_groups or all(res[k]["bias_tis"] >= RESOLVE * res[k]["bias_tis_se"] for k in specs):
                return res
            n = min(4 * n, lab.sweep_max_groups)

    families = families_of(algorithms)
    focus = [n for n, fam in families.items() if kind_of(fam)]      # the two trajectory-level kinds
    checked = [(cap, clip) for cap in members(families, RESCALING) for clip in members(families, CLIPPING)
               if families[cap]["uses_eps"] and families[clip]["uses_eps"]]
    by_g, by_eps, by_kl, delta = [], [], [], []
    for kl in (g_kls(lab) if focus else []):
        pair = _pair(problem, theta0, kl, pseed)
        for G in lab.sweep_group_sizes:
            res = resolved(pair, {n: spec(n, eps) for n in focus}, G, refs=(estimate.REF_TRAJ_IS,))
            by_g += _rows(res, kl=kl, G=G, eps=eps)
    G = lab.sweep_group_size
    pair = _pair(problem, theta0, lab.kl, pseed)
    for e in (EPS_GRID if focus else ()):
        res = resolved(pair, {n: spec(n, e) for n in focus}, G)
        by_eps += _rows(res, kl=lab.kl, G=G, eps=e)
        for cap, clip in checked:
            row = distortion_check(pair, G, lab.sweep_groups, e, next_seed(), cap, clip)
            delta += [{"kl": lab.kl, **row}] if row else []
    names = sorted(set(algorithms))
    for kl in KL_GRID:
        res = estimate.measure(_pair(problem, theta0, kl, pseed), {n: spec(n, eps) for n in names}, G=G,
                               n_groups=lab.sweep_groups, seed=next_seed(), **common)
        by_kl += _rows(res, kl=kl, G=G, eps=eps)
    J0 = float(policy.objective(problem, theta0))
    return {"config": {"vocab": lab.vocab, "length": lab.length, "reward": lab.reward,
                       "reward_frac": lab.reward_frac, "init_scale": lab.init_scale, "problem_seed": pseed,
                       "kl": lab.kl, "g_kls": g_kls(lab), "eps": eps, "adv_mode": adv_mode,
                       "aggregation": aggregation, "sweep_groups": lab.sweep_groups,
                       "sweep_max_groups": lab.sweep_max_groups, "batch_groups": batch_groups,
                       "loop_groups": lab.loop_groups, "sweep_group_size": G, "fit_min_g": lab.sweep_fit_min_g,
                       "J0": J0, "focus": focus, "seconds": round(time.perf_counter() - start, 2)},
            "families": families, "by_g": by_g, "by_eps": by_eps, "by_kl": by_kl, "delta": delta}

