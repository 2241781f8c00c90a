"""Causal LMs: load one from a local path, or build the tiny CPU default for a synthetic task.

The tiny model is a Qwen3-architecture transformers model built from a config (no download) with a
character-level tokenizer, warm-started by a short supervised phase so that it solves some but not
most held-out problems. It is a pure function of its recipe (shape, task, warm-start settings, seed):
built once, cached on disk under a key of that recipe, validated, and rebuilt when missing.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from .config import ModelConfig, TaskConfig

PAD, EOS = "<pad>", "<eos>"
RECIPE_VERSION = 1                      # bump when the build procedure changes
BUILD_THREADS = 1                       # the warm start's result depends on the thread count: pin it
MIN_BASE_ACC, MAX_BASE_ACC = 0.10, 0.60


def cache_root() -> Path:
    return Path(os.environ.get("STALEBENCH_CACHE", Path.home() / ".cache" / "stalebench"))


def char_tokenizer(chars: list[str]) -> PreTrainedTokenizerFast:
    """A character-level fast tokenizer with <pad> (id 0) and <eos> (id 1)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {PAD: 0, EOS: 1, **{c: i + 2 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=PAD))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS, padding_side="left")


def load_model(path: str | Path, dtype: str = "float32") -> tuple[torch.nn.Module, PreTrainedTokenizerFast]:
    """A transformers causal LM and its tokenizer from a local directory (never downloads)."""
    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"no model at {path} (expected a transformers model directory with config.json); "
                                f"set model.path to a local model directory")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=getattr(torch, dtype))
    return model, tokenizer


def model_path(model: ModelConfig, task: TaskConfig) -> Path:
    """The local directory of the run's model: `model.path`, or the cached tiny base model (built if missing)."""
    if model.kind == "path":
        return Path(model.path)
    return ensure_tiny_model(model, task)


def recipe(model: ModelConfig, task: TaskConfig) -> dict:
    keep = ("hidden_size", "num_layers", "num_heads", "intermediate_size", "warmup_lr", "warmup_max_steps",
            "warmup_target_acc", "warmup_seed")
    return {"version": RECIPE_VERSION, "task": task.name, "torch": torch.__version__.split("+")[0],
            **{k: asdict(model)[k] for k in keep}}


def ensure_tiny_model(model: ModelConfig, task: TaskConfig) -> Path:
    """Path of the cached tiny base model for this recipe; built (under a file lock) if missing."""
    spec = recipe(model, task)
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    out = cache_root() / "models" / f"tiny-{task.name}-{key}"
    if (out / "recipe.json").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "recipe.json").exists():        # another process may have built it meanwhile
            _build_tiny_model(model, task, spec, out)
    return out


@contextlib.contextmanager
def _threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _build_tiny_model(cfg: ModelConfig, task_cfg: TaskConfig, spec: dict, out: Path) -> None:
    from .tasks import make_task
    from .tasks.synthetic import ADDREV_VOCAB

    if task_cfg.name != "addrev":
        raise ValueError(f"model.kind 'tiny' is built for the synthetic task 'addrev', not {task_cfg.name!r}; "
                         f"use model.kind: path with a local model for benchmark tasks")
    task = make_task(task_cfg.name)
    tokenizer = char_tokenizer(ADDREV_VOCAB)
    torch.manual_seed(cfg.warmup_seed)
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
                         num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_heads,
                         head_dim=cfg.hidden_size // cfg.num_heads, intermediate_size=cfg.intermediate_size,
                         max_position_embeddings=64, tie_word_embeddings=True, pad_token_id=0, eos_token_id=1,
                         bos_token_id=1)
    model = Qwen3ForCausalLM(config)
    start = time.time()
    with _threads(BUILD_THREADS):
        acc, steps = _warm_start(model, tokenizer, task, cfg)
    if not MIN_BASE_ACC <= acc <= MAX_BASE_ACC:
        raise RuntimeError(f"tiny base model warm start ended at greedy accuracy {acc:.2f} after {steps} steps "
                           f"(need {MIN_BASE_ACC}..{MAX_BASE_ACC}); change model.warmup_seed or model.warmup_target_acc")
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "recipe.json").write_text(json.dumps({**spec, "base_acc": acc, "warmup_steps": steps,
                                                 "build_s": round(time.time() - start, 1)}, indent=1))
    os.replace(tmp, out)


def _warm_start(model, tokenizer, task, cfg: ModelConfig, batch: int = 256, check_every: int = 5) -> tuple[float, int]:
    """Supervised next-token training on answer tokens until validation greedy accuracy ≥ target.

    Accuracy jumps suddenly after a long plateau, so it is checked often, and the latest weights whose
    accuracy lay in the accepted band are kept in case one interval overshoots the band.
    """
    from .rollout.hf import HFEngine

    train = task.problems("train", size=64 * batch, seed=cfg.warmup_seed)                 # cycled
    val = task.problems("train", size=256, seed=cfg.warmup_seed + 10_000)   # disjoint from the eval split
    engine = HFEngine(model, tokenizer)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.warmup_lr, betas=(0.9, 0.99), weight_decay=0.0)
    prompt_len = len(tokenizer(train[0].prompt, add_special_tokens=False)["input_ids"])
    acc, in_band = 0.0, None
    for step in range(1, cfg.warmup_max_steps + 1):
        chunk = train[((step - 1) % 64) * batch: ((step - 1) % 64 + 1) * batch]
        enc = tokenizer([p.prompt + p.answer for p in chunk], add_special_tokens=False)["input_ids"]
        ids = torch.tensor([e + [tokenizer.eos_token_id] for e in enc])          # equal lengths for addrev
        labels = ids.clone()
        labels[:, :prompt_len] = -100
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % check_every == 0:
            acc = greedy_accuracy(engine, task, val)
            if MIN_BASE_ACC <= acc <= MAX_BASE_ACC:
                in_band = (acc, step, {k: v.clone() for k, v in model.state_dict().items()})
            if acc >= cfg.warmup_target_acc:
                break
    if acc > MAX_BASE_ACC and in_band is not None:
        acc, step, state = in_band
        model.load_state_dict(state)
    return acc, step


def greedy_accuracy(engine, task, problems, max_new_tokens: int = 8) -> float:
    out = engine.generate([p.prompt for p in problems], n=1, temperature=0.0, max_new_tokens=max_new_tokens, seed=0)
    return sum(task.reward(text, p) for text, p in zip(out.texts, problems)) / len(problems)
