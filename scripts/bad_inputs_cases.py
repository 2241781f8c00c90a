"""What the bad-input cases share (scripts/bad_inputs.py and its ring-3 group, scripts/bad_inputs_ring3.py): a
sound suite to spoil, the case record, and results directories with one file replaced."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

BASE = {"model": {"kind": "tiny"}, "task": {"name": "addrev", "eval_size": 32},
        "train": {"steps": 4, "prompts_per_step": 4, "max_new_tokens": 6}, "eval": {"every_steps": 2},
        "group_size": 4}
GOOD = {"suite": "s1", "base": BASE, "grid": {"algorithm": ["grpo", "gmc_grpo"]}, "seeds": [0]}
TRIAL = "grpo-s0"


def dump(data) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def suite(**changes) -> str:
    data = {**GOOD, **changes}
    return dump({k: v for k, v in data.items() if v is not None})


def base(**changes) -> str:
    out = {**BASE}
    for dotted, value in changes.items():
        head, _, rest = dotted.replace("__", ".").partition(".")
        out[head] = {**out.get(head, {}), rest: value} if rest else value
    return suite(base=out)


@dataclass
class Case:
    kind: str
    argv: list[str]                       # after `python -m harness.cli`; {d} is the case's directory
    files: dict[str, str | bytes] = field(default_factory=dict)   # relative path -> content
    setup: Callable[[Path], None] | None = None
    expect: str = "refused"               # refused: exit 2, one line | shown: exit 0, no traceback | warned:
    env: dict[str, str] = field(default_factory=dict)    # shown, with a "warning: ... not counted" line
    after: Callable[[Path], str | None] | None = None    # a check once it ran: a problem, or None


def trial_file(name: str, content: str, status: str = '{"status": "completed", "step": 4}') -> Callable[[Path], None]:
    """results/s1/ with two completed trials of sound files (4 steps, evaluations) and `name` of grpo-s0
    replaced by `content`."""
    def setup(d: Path) -> None:
        suite_dir = d / "results" / "s1"
        for tid, algo in ((TRIAL, "grpo"), ("gmc_grpo-s0", "gmc_grpo")):
            t = suite_dir / tid
            t.mkdir(parents=True)
            files = {"params.json": json.dumps({"trial_id": tid, "algorithm": algo, "seed": 0}),
                     "config.yaml": dump({"algorithm": algo, "seed": 0, "train": {"steps": 4}}),
                     "status.json": status,
                     "metrics.jsonl": "".join(json.dumps({"step": s, "loss/value": 0.1}) + "\n" for s in range(1, 5)),
                     "eval.jsonl": "".join(json.dumps({"step": s, "eval/acc": 0.25}) + "\n" for s in (0, 2, 4))}
            if tid == TRIAL:
                files[name] = content
            for fname, text in files.items():
                (t / fname).write_text(text)
        (suite_dir / "suite.yaml").write_text(suite())
    return setup
