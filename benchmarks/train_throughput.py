"""Training throughput of the CPU default: stalebench's trainer against TRL's GRPOTrainer, same batch shape.

    python benchmarks/train_throughput.py                          # stalebench only (TRL not installed)
    /tmp/trl-venv/bin/python benchmarks/train_throughput.py        # both; TRL lives in a side venv (README)
    python benchmarks/train_throughput.py --steps 6 --warmup 2     # quick look

Shape, identical for both systems: the frozen base tiny-addrev-v1 (0.5M-param Qwen3, char tokenizer, float32),
addrev prompts, P=16 prompts × G=8 samples = 128 responses per optimizer step, at most 8 new tokens (stop at
<eos>), temperature 1, AdamW lr 1e-4 (betas 0.9/0.99, no weight decay, constant lr), grad clip 1, no KL,
token-mean loss over the step's tokens, one update per batch, one torch thread. The two systems run in
lockstep in this process, one optimizer step of each in turn (never at the same time; which goes first
alternates), so a change in the machine's load hits both alike; `--steps` steps each, the first `--warmup`
not counted, then the median, and the median of the per-step ratios of the paired steps.

What one step is:
- stalebench: `Trainer.make_batch(i)` (tokenize, KV-cached sampling with behavior log-probs recorded while
  sampling, decode, rewards) = rollout; `Trainer.update(batch)` (advantages, one forward/backward, clip,
  AdamW step, diagnostics) = update. s/step is their sum.
- TRL: s/step is the time between consecutive `on_step_end` callbacks (the whole optimizer step, trainer
  bookkeeping included); rollout is `GRPOTrainer._generate_and_score_completions` (tokenize, `generate`,
  decode, rewards, advantages; no extra log-prob pass since steps and generations are aligned, beta 0);
  update = step − rollout.

Tokens: rollout tok/s counts valid response tokens (up to and including <eos>); update tok/s counts valid
prompt + response tokens. Every rate is the median of the per-step rates. A second table gives the same
steps in process CPU time, which other work on a shared machine disturbs far less than wall time; the
header prints the 1-minute load average, so a busy machine shows.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from harness.trial import numerics  # noqa: E402  (before torch: the float path is fixed at its import)

numerics.pin()   # the trials' float path for both systems (STALEBENCH_FLOAT_PATH=native: MKL and ATen choose)

import torch  # noqa: E402

from harness.config.run import RunConfig, build_run_config
from harness.bases import base_identity
from harness.bases.models import load_model
from harness.tasks import make_task
from harness.trial.trainer import Trainer


@dataclass
class Step:
    step_s: float            # wall seconds of the whole optimizer step
    rollout_s: float         # wall seconds of generation + rewards
    cpu_s: float             # process CPU seconds of the whole step
    rollout_cpu_s: float     # process CPU seconds of the rollout
    response_tokens: int     # valid response tokens (incl. <eos>)
    prompt_tokens: int       # valid prompt tokens

    @property
    def update_s(self) -> float:
        return self.step_s - self.rollout_s


def run_config(args: argparse.Namespace, forward: str = "hf") -> RunConfig:
    return build_run_config({"train": {"steps": max(40, args.steps), "prompts_per_step": args.prompts, "lr": 1e-4,
                                       "max_new_tokens": args.max_new_tokens, "threads": 1},
                             "group_size": args.group_size, "seed": args.seed,
                             "model": {"device": "cpu", "forward": forward}})  # TRL runs with use_cpu=True too


# ----------------------------------------------------------------------------------------------
# stalebench
# ----------------------------------------------------------------------------------------------

class Stalebench:
    def __init__(self, args: argparse.Namespace, forward: str):
        self.name = f"stalebench, {forward} forward"
        self.args, self.forward = args, forward
        self.trainer = Trainer(run_config(args, forward))
        self.index = 0

    def step(self) -> Step:
        cpu0, t0 = time.process_time(), time.perf_counter()
        batch = self.trainer.make_batch(self.index)
        cpu1, t1 = time.process_time(), time.perf_counter()
        self.trainer.update(batch)
        self.trainer.version += 1                             # as `train()` does after each update
        self.index += 1
        r = batch.rollout
        return Step(time.perf_counter() - t0, t1 - t0, time.process_time() - cpu0, cpu1 - cpu0, r.num_tokens,
                    int(r.prompt_mask.sum()))

    def close(self) -> None:
        pass


# ----------------------------------------------------------------------------------------------
# TRL (the peer)
# ----------------------------------------------------------------------------------------------

class TRLPeer:
    """TRL's GRPOTrainer.train() in a background thread, paused at every step end: `step()` runs one step.

    The main thread waits while TRL runs (and TRL waits while the main thread runs), so the two systems
    never compute at the same time and each step's process CPU time is the running system's own.
    """

    def __init__(self, args: argparse.Namespace, out_dir: str):
        import trl
        from datasets import Dataset
        from transformers import PrinterCallback, TrainerCallback
        from trl import GRPOConfig, GRPOTrainer

        self.name = f"TRL {trl.__version__} GRPOTrainer"
        cfg = run_config(args)
        model, tokenizer = load_model(base_identity(cfg.model)[0], cfg.model.dtype)
        task = make_task(cfg.task.name)
        problems = task.problems("train", 4096, args.seed)
        dataset = Dataset.from_dict({"prompt": [p.prompt for p in problems],      # plain text, not conversational
                                     "index": list(range(len(problems)))})

        def addrev_reward(completions: list[str], index: list[int], **_) -> list[float]:
            return [task.reward(text, problems[i]) for text, i in zip(completions, index)]

        config = GRPOConfig(
            output_dir=out_dir, max_steps=args.steps, seed=args.seed,
            per_device_train_batch_size=args.prompts * args.group_size, num_generations=args.group_size,
            gradient_accumulation_steps=1, num_iterations=1, steps_per_generation=1,  # one step = P × G
            max_completion_length=args.max_new_tokens, temperature=cfg.train.temperature, top_p=1.0, top_k=0,
            learning_rate=cfg.train.lr, lr_scheduler_type="constant", warmup_steps=0,
            adam_beta1=cfg.train.beta1, adam_beta2=cfg.train.beta2, weight_decay=cfg.train.weight_decay,
            max_grad_norm=cfg.train.grad_clip, beta=0.0, epsilon=cfg.eps, loss_type="dapo", scale_rewards="group",
            use_vllm=False, use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
            logging_strategy="no", save_strategy="no", report_to="none", disable_tqdm=True,
            dataloader_num_workers=0,
        )
        self.trainer = GRPOTrainer(model=model, reward_funcs=addrev_reward, args=config, train_dataset=dataset,
                                   processing_class=tokenizer)
        self.rollouts: list[tuple[float, float, int, int]] = []  # (wall s, CPU s, response tokens, prompt tokens)
        generate = self.trainer._generate_and_score_completions

        def timed_generate(inputs):
            cpu0, t0 = time.process_time(), time.perf_counter()
            out = generate(inputs)
            self.rollouts.append((time.perf_counter() - t0, time.process_time() - cpu0,
                                  int(out["completion_mask"].sum()), int(out["prompt_mask"].sum())))
            return out

        self.trainer._generate_and_score_completions = timed_generate
        self._go, self._done = threading.Semaphore(0), threading.Semaphore(0)
        self._error: BaseException | None = None
        peer = self

        class Lockstep(TrainerCallback):
            def on_train_begin(self, *_, **__):
                peer._go.acquire()

            def on_step_end(self, *_, **__):
                peer._done.release()
                peer._go.acquire()

        self.trainer.add_callback(Lockstep())
        self.trainer.remove_callback(PrinterCallback)         # its end-of-training summary would clutter the table
        self._thread = threading.Thread(target=self._train, daemon=True)
        self._thread.start()

    def _train(self) -> None:
        try:
            self.trainer.train()
        except Exception as exc:  # noqa: BLE001 — handed to the main thread, which re-raises it in step()
            self._error = exc
        finally:
            self._done.release()

    def step(self) -> Step:
        n = len(self.rollouts)
        cpu0, t0 = time.process_time(), time.perf_counter()
        self._go.release()
        self._done.acquire()
        step_s, cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
        if self._error is not None:
            raise RuntimeError("TRL's training thread failed") from self._error
        if len(self.rollouts) != n + 1:
            raise RuntimeError(f"expected one generation per TRL step; got {len(self.rollouts) - n}")
        roll_s, roll_cpu_s, resp, prompt = self.rollouts[-1]
        return Step(step_s, roll_s, cpu_s, roll_cpu_s, resp, prompt)

    def close(self) -> None:
        self._go.release()                                    # let train() return after its last step
        self._thread.join()


# ----------------------------------------------------------------------------------------------

def wall_row(name: str, steps: list[Step]) -> str:
    med = statistics.median
    step_s = med(s.step_s for s in steps)
    return (f"| {name} | {step_s:.3f} | {1 / step_s:.2f} | {med(s.response_tokens / s.rollout_s for s in steps):.0f} | "
            f"{med((s.prompt_tokens + s.response_tokens) / s.update_s for s in steps):.0f} | "
            f"{med(s.rollout_s for s in steps):.3f} | {med(s.update_s for s in steps):.3f} | "
            f"{statistics.mean(s.response_tokens for s in steps):.0f} |")


def cpu_row(name: str, steps: list[Step]) -> str:
    med = statistics.median
    cpu_s = med(s.cpu_s for s in steps)
    return (f"| {name} | {cpu_s:.3f} | {1 / cpu_s:.2f} | {med(s.rollout_cpu_s for s in steps):.3f} | "
            f"{med(s.cpu_s - s.rollout_cpu_s for s in steps):.3f} |")


def arithmetic_limit(trainer: Trainer, index: int) -> tuple[float, float, float]:
    """(rollout GFLOP, update GFLOP) of one step, counted by torch's FlopCounterMode (matmuls and
    attention, forward and backward), and the GFLOP/s of a plain 1024³ float32 matmul on this thread
    (best of 10): the machine's arithmetic limit for the step."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as rollout:
        batch = trainer.make_batch(index)
    with FlopCounterMode(display=False) as update:
        trainer.update(batch)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    times = []
    for _ in range(13):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return rollout.get_total_flops() / 1e9, update.get_total_flops() / 1e9, 2 * 1024**3 / min(times[3:]) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-trl", action="store_true", help="stalebench only (also the case if TRL is not installed)")
    parser.add_argument("--forwards", default="hf,lean", help="stalebench's model.forward values to time, in turn")
    parser.add_argument("--steps", type=int, default=25, help="optimizer steps per system, warm-up included")
    parser.add_argument("--warmup", type=int, default=5, help="first steps not counted")
    parser.add_argument("--prompts", type=int, default=16, help="P, prompts per step")
    parser.add_argument("--group-size", type=int, default=8, help="G, samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not 0 <= args.warmup < args.steps:
        parser.error("--warmup must be in [0, --steps)")
    warnings.filterwarnings("ignore")

    torch.set_num_threads(1)
    notes = []
    systems: list[Stalebench | TRLPeer] = [Stalebench(args, forward) for forward in args.forwards.split(",")]
    out_dir = tempfile.TemporaryDirectory()
    if not args.no_trl:
        try:
            systems.append(TRLPeer(args, out_dir.name))
        except ImportError as exc:
            notes.append(f"TRL skipped: {exc}")
    torch.set_num_threads(1)                                  # in case a trainer's setup changed it
    load = [os.getloadavg()[0]]
    results: dict[str, list[Step]] = {system.name: [] for system in systems}
    for i in range(args.steps):                               # one step of each system in turn, order alternating
        for system in (systems if i % 2 == 0 else systems[::-1]):
            step = system.step()
            if torch.get_num_threads() != 1:
                raise RuntimeError(f"{system.name} changed torch's thread count to {torch.get_num_threads()}")
            if i >= args.warmup:
                results[system.name].append(step)
        if i == args.steps // 2:
            load.append(os.getloadavg()[0])
    for system in systems:
        system.close()
    out_dir.cleanup()
    load.append(os.getloadavg()[0])

    import transformers
    print(f"P={args.prompts} prompts × G={args.group_size}, max {args.max_new_tokens} new tokens, float32, "
          f"1 torch thread, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{platform.processor() or platform.machine()} × {os.cpu_count()} cores, float path "
          f"{numerics.record()['float_path']} (both systems); median of "
          f"{args.steps - args.warmup} steps after {args.warmup} warm-up; 1-min load average "
          f"{', '.join(f'{x:.2f}' for x in load)} (start, middle, end)\n")
    print("Wall clock:\n")
    print("| system | s/step | steps/s | rollout tok/s | update tok/s | rollout s | update s | resp tok/step |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, steps in results.items():
        print(wall_row(name, steps))
    print("\nProcess CPU time (less disturbed by other work on the machine):\n")
    print("| system | CPU s/step | steps per CPU s | rollout CPU s | update CPU s |")
    print("|---|---:|---:|---:|---:|")
    for name, steps in results.items():
        print(cpu_row(name, steps))
    ours = [system.name for system in systems if isinstance(system, Stalebench)]
    peers = [system.name for system in systems if not isinstance(system, Stalebench)]
    for name_a, name_b in [(a, b) for b in peers for a in ours] + [(ours[i], ours[0]) for i in range(1, len(ours))]:
        a, b = results[name_a], results[name_b]
        ratio = {unit: statistics.median(getattr(y, unit) / getattr(x, unit) for x, y in zip(a, b))
                 for unit in ("step_s", "cpu_s")}
        print(f"\n{name_a} steps/s ÷ {name_b} steps/s, median over the paired steps: "
              f"{ratio['step_s']:.3f} wall clock, {ratio['cpu_s']:.3f} CPU time")
    for system in systems:
        if isinstance(system, Stalebench):
            limit(system, results[system.name])
    for note in notes:
        print(f"\n{note}")


def limit(system: Stalebench, steps: list[Step]) -> None:
    name = system.name
    # engine 3's matmuls are OpenBLAS calls, which FlopCounterMode (ATen's dispatcher) cannot see: its step does
    # the lean forward's arithmetic (the same model and shapes), so that is what is counted for it
    counted = Stalebench(system.args, "lean") if system.forward == "lean3" else system
    rollout_gf, update_gf, peak = arithmetic_limit(counted.trainer, counted.index)
    cpu_s = statistics.median(s.cpu_s for s in steps)
    print(f"\nArithmetic limit: one {name} step is {rollout_gf + update_gf:.2f} GFLOP (rollout {rollout_gf:.2f}, "
          f"update {update_gf:.2f}; matmuls and attention, FlopCounterMode{' on the lean forward' if counted is not system else ''}); "
          f"a plain 1024³ float32 matmul runs at "
          f"{peak:.0f} GFLOP/s on one thread here, so the step's floor is {(rollout_gf + update_gf) / peak * 1e3:.0f} ms "
          f"against {cpu_s * 1e3:.0f} ms measured: {(rollout_gf + update_gf) / cpu_s:.0f} GFLOP/s, "
          f"{(rollout_gf + update_gf) / cpu_s / peak:.0%} of that peak.")


if __name__ == "__main__":
    main()
