"""Causal LMs: the frozen base checkpoints every trial starts from, local models, and the base builder.

The CPU default starts from a frozen base shipped in the repository (harness/bases/<name>/): a
Qwen3-architecture transformers model with a character tokenizer, warm-started on the synthetic task,
with a manifest (base.json) holding every file's sha256, its recipe and its measured accuracy on the
fixed eval set. Trials verify the hashes before training, so every machine starts from the same bytes
and a result names the exact base it came from. `build_base` (`stalebench build-base`) makes a new
version; it is never used implicitly, because its output differs across CPUs (see BaseRecipe).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from harness.store.safewrite import open_append
from harness.bases import BASES_DIR, MANIFEST, BaseModelError, read_manifest, sha256_file
from harness.store.provenance import cpu_name

PAD, EOS = "<pad>", "<eos>"
BUILD_THREADS = 1                       # the warm start's result depends on the thread count: pin it
MIN_BASE_ACC, MAX_BASE_ACC = 0.10, 0.60
CANDIDATES = BASES_DIR / "candidates.jsonl"      # every candidate base built with a probe, and its verdict


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
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()           # "Loading weights" bars would flood trial and CLI output
    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"no model at {path} (expected a transformers model directory with config.json); "
                                f"set model.path to a local model directory")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=getattr(torch, dtype))
    return model, tokenizer


def check_eval_set(base_dir: Path, eval_set_sha256: str, size: int) -> None:
    """Refuse a fixed eval set that differs from the one the frozen base was measured on (same size):
    the task's generator changed, and results would not be comparable with the base's."""
    manifest = read_manifest(base_dir)
    if size == manifest.get("eval_size") and eval_set_sha256 != manifest.get("eval_set_sha256"):
        raise BaseModelError(f"task eval set sha256 {eval_set_sha256[:16]} differs from the {manifest.get('eval_set_sha256')} "
                             f"that base {manifest['name']!r} was measured on: the task generator changed; restore it, "
                             f"or build a new base version (`stalebench build-base`)")


# ----------------------------------------------------------------------------------------------
# Building a new base version (`stalebench build-base`)
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BaseRecipe:
    """How a tiny base checkpoint is built: a Qwen3-architecture model warm-started on a synthetic task.

    The warm start is deterministic on one machine but not across CPUs (float reductions differ by
    kernel, and the sudden accuracy jump after a long loss plateau amplifies them: two machines of one
    kind stopped at 245 and 295 steps). That is why the result is frozen and shipped, and why a rebuilt
    checkpoint is a new base version — a new benchmark — never a silent replacement.
    """
    name: str
    task: str = "addrev"
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 512
    warmup_lr: float = 2e-3
    warmup_max_steps: int = 3000
    warmup_target_acc: float = 0.2         # stop once greedy validation accuracy reaches this
    warmup_seed: int = 0
    warmup_check_every: int = 5            # steps between validation checks (cumsum's accuracy jumps within ~5 steps)
    eval_size: int = 500                   # the fixed eval set the base accuracy is measured on
    # The learnability probe (harness/suite/learnability.py): on-policy grpo from the candidate on seeds
    # 0..probe_seeds-1; frozen only if every rule below holds. probe_seeds 0: no probe (v1's recipe).
    probe_seeds: int = 0
    probe_steps: int = 200
    probe_lr: float = 1e-4
    probe_eval_every: int = 50
    probe_min_gain: float = 0.30           # mean final − start held-out greedy accuracy
    probe_max_seed_sd: float = 0.03        # sample SD of the seeds' final accuracies
    probe_max_zero_adv: float = 0.30       # mean fraction of groups with G equal rewards
    probe_forward: str = "hf"              # the probe trainer's model.forward (lean3 for v3's long responses)
    probe_temperature: float = 1.0         # the probe's sampling temperature (train.temperature; v3's is 0.8)


def build_base(recipe: BaseRecipe, out: Path) -> dict:
    """Build, validate and save base `recipe` to `out` with its manifest; returns the manifest. A recipe with a
    learnability probe (probe_seeds > 0) is built by harness.suite.learnability.build_probed_base instead."""
    if recipe.probe_seeds:
        raise BaseModelError("build-base: this recipe has a learnability probe (probe_seeds > 0); build it with "
                             "harness.suite.learnability.build_probed_base (`stalebench build-base` does)")
    model, tokenizer, steps, acc, start = warm_start_base(recipe, out)
    return save_base(model, tokenizer, recipe, out, steps, acc, time.time() - start)


def warm_start_base(recipe: BaseRecipe, out: Path):
    """(model, tokenizer, warm-up steps, validation accuracy, start time) of a new base `recipe`, refusing an
    existing `out` and a warm start that ends outside the accepted accuracy band."""
    from harness.tasks import make_task, registered, task_entry

    synthetic = [t.name for t in registered() if t.vocab is not None]
    if recipe.task not in synthetic:
        raise BaseModelError(f"build-base: task {recipe.task!r} has no tiny base recipe; use one of "
                             f"{', '.join(synthetic)} (a synthetic task with a vocab)")
    out = Path(out)
    if out.exists():
        raise BaseModelError(f"build-base: {out} exists; a base version is never overwritten — pick a new --name")
    task = make_task(recipe.task, eval_size=recipe.eval_size)
    tokenizer = char_tokenizer(list(task_entry(recipe.task).vocab))
    longest = len(task.problems("eval", 1, 0)[0].prompt) + getattr(task, "max_response_tokens", 8)
    positions = max(64, 1 << (longest - 1).bit_length())      # 64 for v1 and v2's tasks; 256 for cumsum-long
    torch.manual_seed(recipe.warmup_seed)
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=recipe.hidden_size, num_hidden_layers=recipe.num_layers,
                         num_attention_heads=recipe.num_heads, num_key_value_heads=recipe.num_heads,
                         head_dim=recipe.hidden_size // recipe.num_heads, intermediate_size=recipe.intermediate_size,
                         max_position_embeddings=positions, tie_word_embeddings=True, pad_token_id=0, eos_token_id=1,
                         bos_token_id=1)
    model = Qwen3ForCausalLM(config)
    start = time.time()
    with _threads(BUILD_THREADS):
        acc, steps = _warm_start(model, tokenizer, task, recipe, check_every=recipe.warmup_check_every)
    if not MIN_BASE_ACC <= acc <= MAX_BASE_ACC:
        if recipe.probe_seeds:
            record_candidate(recipe, {"warmup_steps": steps, "validation_acc": acc}, [
                f"warm start ended at validation accuracy {acc:.3f} (need {MIN_BASE_ACC}..{MAX_BASE_ACC})"])
        raise BaseModelError(f"build-base: the warm start ended at greedy accuracy {acc:.2f} after {steps} steps "
                             f"(need {MIN_BASE_ACC}..{MAX_BASE_ACC}); change warmup_seed or warmup_target_acc")
    return model, tokenizer, steps, acc, start


def record_candidate(recipe: BaseRecipe, record: dict, reasons: list[str]) -> None:
    """Append one line to harness/bases/candidates.jsonl: every candidate built, accepted or not, and why."""
    line = {"name": recipe.name, "recipe": asdict(recipe), "accepted": not reasons, "reasons": reasons, **record,
            "cpu": cpu_name(), "torch": torch.__version__, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with open_append(CANDIDATES) as f:
        f.write(json.dumps(line) + "\n")


def save_base(model, tokenizer, recipe: BaseRecipe, out: Path, warmup_steps: int, validation_acc: float,
              build_s: float, extra: dict | None = None) -> dict:
    """Measure a built base on the task's fixed eval set (overall and by answer length) and save it with its
    manifest (atomically); `extra` (e.g. the learnability probe's record) joins the manifest."""
    from harness.rollout.hf import HFEngine
    from harness.tasks import make_task

    import platform
    task = make_task(recipe.task, eval_size=recipe.eval_size)
    eval_problems = task.problems("eval", None, 0)
    with _threads(BUILD_THREADS):
        rewards = greedy_rewards(HFEngine(model, tokenizer), task, eval_problems)
    eval_acc = sum(rewards) / len(rewards)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    files = {p.name: sha256_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
    manifest = {"name": recipe.name, "sha256": files["model.safetensors"], "files": files,
                "recipe": asdict(recipe), "warmup_steps": warmup_steps, "validation_acc": validation_acc,
                "eval_set_sha256": problems_sha256(eval_problems), "eval_size": len(eval_problems),
                "eval_acc": eval_acc, "built_with": {"torch": torch.__version__, "threads": BUILD_THREADS,
                                                      "cpu": cpu_name(), "machine": platform.machine()},
                "build_s": round(build_s, 1), "eval_acc_by_answer_len": accuracy_by_length(eval_problems, rewards),
                **(extra or {})}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, out)
    return manifest


def problems_sha256(problems) -> str:
    """Identity of a problem set: sha256 of its (prompt, answer) pairs in order."""
    return hashlib.sha256(json.dumps([[p.prompt, p.answer] for p in problems]).encode()).hexdigest()
@contextlib.contextmanager
def _threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _warm_start(model, tokenizer, task, cfg: BaseRecipe, batch: int = 256, check_every: int = 5) -> tuple[float, int]:
    """Supervised next-token training on answer tokens until validation greedy accuracy ≥ target.

    Accuracy jumps suddenly after a long plateau, so it is checked often, and the latest weights whose
    accuracy lay in the accepted band are kept in case one interval overshoots the band.
    """
    from harness.rollout.hf import HFEngine

    train = task.problems("train", size=64 * batch, seed=cfg.warmup_seed)                 # cycled
    val = task.problems("train", size=256, seed=cfg.warmup_seed + 10_000)   # disjoint from the eval split
    engine = HFEngine(model, tokenizer)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.warmup_lr, betas=(0.9, 0.99), weight_decay=0.0)
    acc, in_band = 0.0, None
    for step in range(1, cfg.warmup_max_steps + 1):
        chunk = train[((step - 1) % 64) * batch: ((step - 1) % 64 + 1) * batch]
        ids, labels = _supervised_batch(tokenizer, chunk)
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


def _supervised_batch(tokenizer, problems) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, labels) of prompt + answer + <eos>, right-padded; labels -100 on the prompt and the padding.
    Padding sits after every real token, so causal attention never sees it and no mask is needed (addrev's
    rows are all one length: no padding, the tensors v1's base was built with)."""
    prompts = tokenizer([p.prompt for p in problems], add_special_tokens=False)["input_ids"]
    answers = tokenizer([p.answer for p in problems], add_special_tokens=False)["input_ids"]
    width = max(len(p) + len(a) + 1 for p, a in zip(prompts, answers))
    ids = torch.full((len(problems), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(problems), width), -100, dtype=torch.long)
    for i, (p, a) in enumerate(zip(prompts, answers)):
        row = p + a + [tokenizer.eos_token_id]
        ids[i, :len(row)] = torch.tensor(row)
        labels[i, len(p):len(row)] = torch.tensor(a + [tokenizer.eos_token_id])
    return ids, labels


def greedy_rewards(engine, task, problems) -> list[float]:
    """Each problem's reward for the greedy response (at most the task's longest answer + <eos>)."""
    max_new_tokens = getattr(task, "max_response_tokens", 8)
    out = engine.generate([p.prompt for p in problems], n=1, temperature=0.0, max_new_tokens=max_new_tokens, seed=0)
    return [task.reward(text, p) for text, p in zip(out.texts, problems)]


def greedy_accuracy(engine, task, problems) -> float:
    return sum(greedy_rewards(engine, task, problems)) / len(problems)


def accuracy_by_length(problems, rewards) -> dict[str, float]:
    """Accuracy per answer length (cumsum: the difficulty n), keys sorted by length."""
    by: dict[int, list[float]] = {}
    for p, r in zip(problems, rewards):
        by.setdefault(len(p.answer), []).append(r)
    return {str(n): round(sum(v) / len(v), 4) for n, v in sorted(by.items())}
