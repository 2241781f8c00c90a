"""Engine 3 against engine 2: steps per CPU-second on v2's shape, and the cost of long responses, paired.

    python benchmarks/engine_speed.py                          # 12 steps after 3 per system; T = 16, 32, 64, 128
    python benchmarks/engine_speed.py --steps 6 --warmup 2 --lengths 16,128    # quick look
    python benchmarks/engine_speed.py --profile                # where engine 3's v2-shape step spends its CPU
    python benchmarks/engine_speed.py --padding                # v3's minibatch updates with and without buckets

Part 1, v2's shape: two trainers of the v2 reference's on-policy trial (suites/reference-v2.yaml, grpo, delay
0, seed 0, the frozen base tiny-cumsum-v2a, 8 prompts x 16 responses of 6-21 tokens, one thread), one with
`model.forward: lean` (engine 2) and one with `lean3` (engine 3), run in lockstep: one step each in turn
(`Trainer.make_batch` + `Trainer.update`), which goes first alternating, so the machine's load hits both
alike. The figure is the median of the per-step ratios of process CPU time, engine 2's over engine 3's
(= engine 3's steps per CPU-second over engine 2's). Engine 3's padding waste in the update (the share of
padded cells in the response grid, before its length buckets) is printed too.

Part 2, long responses: the same two trainers at `train.max_new_tokens` T for each --lengths value, with
<eos> never sampled (the tokenizer's eos id hidden from the engine), so that every response has T tokens
and a step has 128·T response tokens; again in lockstep. Printed per T: CPU seconds per step (median) and
per response token, and the paired ratio. A cost per token that stays flat as T grows is the linear cost.

Both engines run in this process on the trials' pinned float path (harness/trial/numerics.py: engine 2's
matmuls in MKL's COMPATIBLE branch, engine 3's in OpenBLAS's Haswell kernels), printed at the start. The
1-minute load average is printed at the start and the end: on a shared 2-core machine, read the ratios.

--profile: engine 3 alone, --steps on-policy v2-shape steps after --warmup under cProfile; prints the
functions with the largest own CPU time and their share of the profiled steps (an OpenBLAS GEMM is its
Python wrapper's own time: harness/rollout/gemm3.py calls it through ctypes).

--padding: v3's shape (suites/reference-v3.yaml's on-policy grpo trial, seed 0: 8 prompts x 16 responses of
25-97 tokens, 4 minibatch updates per batch). Each minibatch is trained on twice in turn, once with the
update's attention in length buckets (lean3.PADDING_WASTE_MAX as set) and once padded to one length
(buckets off), which goes first alternating; printed: the padding waste of the minibatches' response grids
and the paired ratio of the update's CPU time without buckets over with them (> 1: the buckets pay), and the
largest difference of the response logits with and without them (other bits: the threshold is engine 3's).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from harness.trial import numerics  # noqa: E402  (before torch: the float path is fixed at its import)

numerics.pin()

import torch  # noqa: E402

from harness.rollout import lean3  # noqa: E402
from harness.config.run import build_run_config  # noqa: E402
from harness.config.expand import load_suite_file  # noqa: E402
from harness.trial.trainer import Trainer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ENGINES = {"engine 2": "lean", "engine 3": "lean3"}


class _NoEos:
    """The tokenizer with its <eos> id hidden from the engine: responses run max_new_tokens."""
    eos_token_id = -1

    def __init__(self, tok):
        self._tok = tok

    def __getattr__(self, name):
        return getattr(self._tok, name)

    def __call__(self, *args, **kwargs):
        return self._tok(*args, **kwargs)


def trainer(forward: str, max_new_tokens: int | None = None) -> Trainer:
    suite = load_suite_file(REPO / "suites" / "reference-v2.yaml")
    over = {"seed": 0, "delay": 0, "algorithm": "grpo", "model.forward": forward}
    if max_new_tokens:
        over["train.max_new_tokens"] = max_new_tokens
    t = Trainer(build_run_config(suite.base, over))
    if max_new_tokens:
        t.engine.tokenizer = _NoEos(t.engine.tokenizer)
    return t


def step(t: Trainer, i: int, waste: list[float]) -> tuple[float, int]:
    """(process CPU seconds of one on-policy step, its valid response tokens)."""
    cpu = time.process_time()
    batch = t.make_batch(i)
    t.update(batch)
    t.version += 1
    waste.append(lean3.padding_waste(batch.rollout.response_mask))
    return time.process_time() - cpu, int(batch.rollout.response_mask.sum())


def lockstep(systems: dict[str, Trainer], steps: int, warmup: int) -> dict[str, list[tuple[float, int, float]]]:
    rows: dict[str, list] = {n: [] for n in systems}
    names = list(systems)
    for i in range(warmup + steps):
        for n in names[i % 2:] + names[:i % 2]:
            waste: list[float] = []
            cpu, tokens = step(systems[n], i, waste)
            rows[n].append((cpu, tokens, waste[0]))
    return {n: r[warmup:] for n, r in rows.items()}


def profile(steps: int, warmup: int, top: int = 10) -> None:
    t = trainer(ENGINES["engine 3"])
    for i in range(warmup):
        step(t, i, [])
    prof = cProfile.Profile(time.process_time)
    prof.runcall(lambda: [step(t, warmup + i, []) for i in range(steps)])
    st = pstats.Stats(prof)
    total = st.total_tt
    print(f"engine 3, v2 shape: {total / steps:.3f} CPU s/step over {steps} steps (cProfile's overhead included); "
          f"largest own time:")
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:top]
    for (path, line, name), (_, calls, own, _, _) in rows:
        where = f"{Path(path).name}:{line}" if line else path
        print(f"  {own / total:6.1%}  {calls:>8} calls  {name} ({where})")


def padding(steps: int, warmup: int) -> None:
    suite = load_suite_file(REPO / "suites" / "reference-v3.yaml")
    t = Trainer(build_run_config(suite.base, {"seed": 0, "delay": 0, "algorithm": "grpo"}))
    waste, ratios, diffs, threshold = [], [], [], lean3.PADDING_WASTE_MAX
    for i in range(warmup + steps):
        for j, part in enumerate(t.make_batch(i).minibatches(t.cfg.train.minibatches)):
            diffs.append(_bucket_difference(t, part.rollout, threshold))
            cpu = {}
            for bucketed in ((True, False) if j % 2 == 0 else (False, True)):
                lean3.PADDING_WASTE_MAX = threshold if bucketed else 1.0
                start = time.process_time()
                t.update(part)
                cpu[bucketed] = time.process_time() - start
            lean3.PADDING_WASTE_MAX = threshold
            if i >= warmup:
                waste.append(lean3.padding_waste(part.rollout.response_mask))
                ratios.append(cpu[False] / cpu[True])
    print(f"v3 shape: padding waste of the minibatches' response grids median {statistics.median(waste):.0%} "
          f"({min(waste):.0%}-{max(waste):.0%}, {len(waste)} minibatches; buckets above {threshold:.0%})")
    print(f"update CPU time without buckets / with them: {statistics.median(ratios):.2f}x (paired median)")
    print(f"largest |logit| difference, buckets against none: {max(diffs):.1e} (0 = the same bits)")


def _bucket_difference(t: Trainer, r, threshold: float) -> float:
    """The largest difference of the trainer's response logits with and without length buckets (no grad)."""
    rows, mask, logits = slice(0, r.response_ids.shape[0]), r.response_mask.bool(), []
    for limit in (threshold, 1.0):
        lean3.PADDING_WASTE_MAX = limit
        with torch.no_grad():
            logits.append(lean3.response_logits(t.model, r, rows, t.cfg.group_size)[mask])
    lean3.PADDING_WASTE_MAX = threshold
    return float((logits[0] - logits[1]).abs().max())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--lengths", default="16,32,64,128", help="response lengths T of part 2 ('' skips it)")
    p.add_argument("--profile", action="store_true", help="profile engine 3's v2-shape steps instead (cProfile)")
    p.add_argument("--padding", action="store_true", help="v3's updates with and without length buckets instead")
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.profile or args.padding:
        print(f"load average {os.getloadavg()[0]:.2f} at the start", flush=True)
        (profile if args.profile else padding)(args.steps, args.warmup)
        return print(f"load average {os.getloadavg()[0]:.2f} at the end")
    print(f"load average {os.getloadavg()[0]:.2f} at the start; torch threads 1; float paths: engine 2 "
          f"{numerics.record('cpu', 2)['float_path']}, engine 3 {numerics.record('cpu', 3)['float_path']}", flush=True)
    for T in [int(x) for x in args.lengths.split(",") if x]:
        rows = lockstep({n: trainer(f, T) for n, f in ENGINES.items()}, args.steps, args.warmup)
        cells = []
        for n in ENGINES:
            cpu = statistics.median(c for c, _, _ in rows[n])
            tokens = statistics.median(k for _, k, _ in rows[n])
            cells.append(f"{n} {cpu:.3f} CPU s/step, {1e6 * cpu / tokens:.0f} us/response token")
        ratio = statistics.median(a[0] / b[0] for a, b in zip(rows["engine 2"], rows["engine 3"]))
        print(f"T={T:>3} ({int(tokens)} response tokens/step): " + "; ".join(cells) + f"; engine 3 {ratio:.2f}x (paired)",
              flush=True)
    rows = lockstep({n: trainer(f) for n, f in ENGINES.items()}, args.steps, args.warmup)
    for n in ENGINES:
        print(f"v2 shape, {n}: {statistics.median(c for c, _, _ in rows[n]):.3f} CPU s/step, "
              f"{statistics.median(k for _, k, _ in rows[n]):.0f} response tokens/step, padding waste of the update's "
              f"grid {statistics.median(w for _, _, w in rows[n]):.0%}")
    ratio = statistics.median(a[0] / b[0] for a, b in zip(rows["engine 2"], rows["engine 3"]))
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    print(f"engine 3 vs engine 2 (v2 shape): {ratio:.2f}× steps per CPU-second (paired)")


if __name__ == "__main__":
    main()
