"""How much learning signal a base gives at each sampling temperature, on the validation split only.

    python scripts/base_signal.py harness/bases/<base> --temperatures 1.0,0.9,0.8,0.7 [--prompts 200]

For the first `--prompts` validation problems of the base's task (cumsum-long: its fixed validation split,
never the test split), G = 16 responses each at every temperature on engine 3 (seed 0), and the greedy
response: the greedy accuracy, the sampled accuracy, and the share of prompt groups whose 16 rewards are all
equal (zero advantage: no gradient for any estimator), split into all-wrong and all-right, overall and by
answer length. Benchmark v3 chose its sampling temperature from this table (docs/benchmark-v3.md §2).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from harness.trial import numerics  # noqa: E402  (before torch: the float path is fixed at its import)

numerics.pin()

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from harness.rollout import lean3  # noqa: E402
from harness.tasks import make_task  # noqa: E402

GROUP = 16
BANDS = ((24, 40), (41, 60), (61, 80), (81, 96))


def signal(base: Path, temperatures: list[float], prompts: int) -> list[dict]:
    task = make_task(json.loads((base / "base.json").read_text())["recipe"]["task"])
    problems = task.problems("validation", prompts, 0)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    engine = lean3.engine(model, AutoTokenizer.from_pretrained(base))
    longest = task.max_response_tokens
    greedy = engine.generate([p.prompt for p in problems], n=1, temperature=0.0, max_new_tokens=longest, seed=0)
    right = torch.tensor([task.reward(t, p) for t, p in zip(greedy.texts, problems)])
    length = torch.tensor([len(p.answer) for p in problems])
    rows = []
    for temperature in temperatures:
        out = engine.generate([p.prompt for p in problems], n=GROUP, temperature=temperature, max_new_tokens=longest,
                              seed=0)
        p = torch.tensor([task.reward(t, problems[i // GROUP]) for i, t in enumerate(out.texts)]).view(-1, GROUP).mean(1)
        for name, m in [("all", torch.ones_like(length, dtype=torch.bool))] + [
                (f"{lo}-{hi}", (length >= lo) & (length <= hi)) for lo, hi in BANDS]:
            rows.append({"temperature": temperature, "lengths": name, "prompts": int(m.sum()),
                         "greedy_acc": float(right[m].mean()), "sampled_acc": float(p[m].mean()),
                         "zero_adv": float(((p[m] == 0) | (p[m] == 1)).float().mean()),
                         "all_wrong": float((p[m] == 0).float().mean()), "all_right": float((p[m] == 1).float().mean())})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path, help="a base directory (harness/bases/<name>) or a candidate's")
    ap.add_argument("--temperatures", default="1.0,0.9,0.8,0.7")
    ap.add_argument("--prompts", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("| T | answer digits | prompts | greedy acc | sampled acc | zero-advantage groups (all wrong / all right) |")
    print("|---:|---|---:|---:|---:|---|")
    for r in signal(args.base, [float(t) for t in args.temperatures.split(",")], args.prompts):
        print(f"| {r['temperature']:g} | {r['lengths']} | {r['prompts']} | {r['greedy_acc']:.3f} | {r['sampled_acc']:.3f} | "
              f"{r['zero_adv']:.3f} ({r['all_wrong']:.3f} / {r['all_right']:.3f}) |")


if __name__ == "__main__":
    main()
