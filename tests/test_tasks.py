"""Tests for harness.tasks: the addrev synthetic task, the benchmark loaders and the registry."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from harness.tasks import Problem, Task, make_task, task_names
from harness.tasks.benchmarks import DATA_DIR_ENV, PROMPT_SUFFIX, REPO_DATA_DIR, BenchmarkTask, default_data_dir
from harness.tasks.synthetic import ADDREV_VOCAB, addrev_answer, addrev_prompt, addrev_task

DATA_DIR = default_data_dir()                           # the one data location: $STALEBENCH_DATA_DIR or the repo's copy
needs_data = pytest.mark.skipif(not DATA_DIR.is_dir(), reason=f"benchmark data not at {DATA_DIR}")


# ---------------------------------------------------------------- addrev


@pytest.mark.parametrize(
    ("a", "b", "prompt", "answer"),
    [
        (42, 913, "042+913=", "5590"),  # 42 + 913 = 955 -> "0955" -> reversed "5590"
        (999, 999, "999+999=", "8991"),  # 1998 -> reversed "8991"
        (0, 0, "000+000=", "0000"),  # 0 -> "0000"
        (500, 500, "500+500=", "0001"),  # 1000 -> reversed "0001"
        (1, 9, "001+009=", "0100"),  # 10 -> "0010" -> reversed "0100"
        (123, 4, "123+004=", "7210"),  # 127 -> "0127" -> reversed "7210"
    ],
)
def test_addrev_format_hand_computed(a: int, b: int, prompt: str, answer: str) -> None:
    assert addrev_prompt(a, b) == prompt
    assert addrev_answer(a, b) == answer


def test_addrev_problems_are_self_consistent() -> None:
    task = addrev_task()
    for problem in task.problems("eval", None, seed=0) + task.problems("train", 2000, seed=3):
        a, b = problem.prompt.rstrip("=").split("+")
        assert problem.prompt == f"{a}+{b}=" and len(a) == len(b) == 3
        assert int(problem.answer[::-1]) == int(a) + int(b) and len(problem.answer) == 4
        assert problem.uid == f"addrev-{a}{b}"


def test_addrev_vocab_covers_every_prompt_and_answer() -> None:
    assert sorted(ADDREV_VOCAB) == sorted("0123456789+=")
    for problem in addrev_task().problems("train", 1000, seed=0):
        assert set(problem.prompt + problem.answer) <= set(ADDREV_VOCAB)


def test_addrev_eval_is_fixed_and_seed_independent() -> None:
    task = addrev_task()
    eval_a = task.problems("eval", None, seed=0)
    assert len(eval_a) == 500 and len({p.uid for p in eval_a}) == 500
    assert addrev_task().problems("eval", None, seed=99) == eval_a
    assert task.problems("eval", 10, seed=0) == eval_a[:10]
    assert len(addrev_task(eval_size=50).problems("eval", None, seed=0)) == 50


def test_addrev_train_is_deterministic_per_seed() -> None:
    task = addrev_task()
    first = task.problems("train", 1000, seed=7)
    assert addrev_task().problems("train", 1000, seed=7) == first
    assert task.problems("train", 1000, seed=8) != first
    assert len({p.uid for p in first}) == 1000  # drawn without replacement


def test_addrev_train_and_eval_are_disjoint() -> None:
    task = addrev_task()
    eval_uids = {p.uid for p in task.problems("eval", None, seed=0)}
    for seed in (0, 1):
        train = task.problems("train", None, seed=seed)
        assert len(train) == 100_000
        assert not eval_uids & {p.uid for p in train}


def test_addrev_rejects_bad_split_and_sizes() -> None:
    task = addrev_task(eval_size=20)
    with pytest.raises(ValueError, match="unknown split"):
        task.problems("test", None, seed=0)
    with pytest.raises(ValueError, match="eval size"):
        task.problems("eval", 21, seed=0)
    with pytest.raises(ValueError, match="train size"):
        task.problems("train", 1_000_000, seed=0)  # only 10^6 - 20 non-eval pairs exist


@pytest.mark.parametrize(
    ("completion", "reward"),
    [
        ("5590", 1.0),
        ("  5590\n", 1.0),  # surrounding whitespace is stripped
        ("5591", 0.0),
        ("0955", 0.0),  # the unreversed sum
        ("55900", 0.0),
        ("", 0.0),
        ("5 590", 0.0),  # inner whitespace is not
    ],
)
def test_addrev_reward(completion: str, reward: float) -> None:
    problem = Problem(prompt="042+913=", answer="5590", uid="addrev-042913")
    assert addrev_task().reward(completion, problem) == reward


# ---------------------------------------------------------------- benchmarks

BENCHMARK_ROWS = {  # from PROVENANCE.md
    "gsm8k": 1319,
    "math500": 500,
    "aime24": 30,
    "amc23": 40,
    "minerva": 272,
    "olympiadbench": 675,
}


def test_default_data_dir_is_the_repository_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    assert default_data_dir() == Path(__file__).resolve().parents[1] / "data" / "benchmarks"
    monkeypatch.setenv(DATA_DIR_ENV, "/somewhere/else")
    assert default_data_dir() == Path("/somewhere/else")


def test_shipped_benchmark_files_are_the_recorded_bytes() -> None:
    # The repository's copy, not $STALEBENCH_DATA_DIR: every file the loaders read is listed in SHA256SUMS
    # and hashes to what it records (an edited, truncated or missing file fails here, never skips).
    recorded = dict(reversed(line.split("  ")) for line in (REPO_DATA_DIR / "SHA256SUMS").read_text().splitlines())
    assert set(recorded) == {"gsm8k_test.jsonl", "gsm8k_train.jsonl", "math500_test.jsonl", "aime24_test.jsonl",
                             "amc23_test.jsonl", "minerva_math_test.jsonl", "olympiadbench_test.jsonl"}
    assert recorded["gsm8k_test.jsonl"] == "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"
    for name, sha256 in recorded.items():
        assert hashlib.sha256((REPO_DATA_DIR / name).read_bytes()).hexdigest() == sha256, name


@needs_data
@pytest.mark.parametrize(("name", "rows"), sorted(BENCHMARK_ROWS.items()))
def test_benchmark_loads_every_row(name: str, rows: int) -> None:
    problems = make_task(name, data_dir=DATA_DIR).problems("eval", None, seed=0)
    assert len(problems) == rows
    assert len({p.uid for p in problems}) == rows
    assert all(p.answer.strip() for p in problems)
    assert all(p.prompt.endswith(PROMPT_SUFFIX) and len(p.prompt) > len(PROMPT_SUFFIX) for p in problems)


@needs_data
@pytest.mark.parametrize(
    ("name", "index", "gold"),
    [
        ("gsm8k", 0, "18"),  # "... #### 18"
        ("gsm8k", 146, "2125"),  # "#### 2,125": comma stripped
        ("gsm8k", 489, "-10"),
        ("math500", 0, r"\left( 3, \frac{\pi}{2} \right)"),
        ("aime24", 0, "204"),
        ("amc23", 0, "27"),  # stored as the float 27.0
        ("minerva", 0, "1.6"),
        # nested braces inside \boxed{...}: the balanced scan keeps the whole fraction
        ("minerva", 12, r"\frac{2 \pi c^{2} R^{2}}{\lambda^{5}\left[e^{h c /(\lambda k T)}-1\right] d^{2}}"),
        ("olympiadbench", 0, "2"),  # ["2"]
        ("olympiadbench", 1, r"\frac{1}{2 n+2}"),  # ["$\frac{1}{2 n+2}$"]
        ("olympiadbench", 13, "69,84"),  # ["$69$,$84$"]
    ],
)
def test_benchmark_gold_answers(name: str, index: int, gold: str) -> None:
    assert make_task(name).problems("eval", None, seed=0)[index].answer == gold


@needs_data
def test_benchmark_prompt_and_size_prefix() -> None:
    task = make_task("gsm8k")
    first = task.problems("eval", 5, seed=0)
    assert first == task.problems("eval", None, seed=1)[:5]  # file order, seed unused
    assert first[0].uid == "gsm8k-0"
    assert first[0].prompt.startswith("Janet\u2019s ducks lay 16 eggs per day.")
    suffix = "\nPlease reason step by step, and put your final answer within \\boxed{}."
    assert first[0].prompt.endswith(suffix)


@needs_data
def test_gsm8k_train_split_and_others_eval_only() -> None:
    train = make_task("gsm8k").problems("train", None, seed=0)
    assert len(train) == 7473 and train[0].answer == "72" and train[0].uid == "gsm8k-train-0"
    for name in sorted(set(BENCHMARK_ROWS) - {"gsm8k"}):
        with pytest.raises(ValueError, match=f"^benchmark {name} has no train split; use it for eval only$"):
            make_task(name).problems("train", None, seed=0)


@needs_data
def test_gsm8k_validation_split_is_held_out_of_train_and_never_the_test_file() -> None:
    full = make_task("gsm8k").problems("train", None, seed=0)
    task = make_task("gsm8k", validation_size=500)
    train, validation, test = (task.problems(s, None, seed=3) for s in ("train", "validation", "eval"))
    assert task.splits == ("eval", "train", "validation") and make_task("gsm8k").splits == ("eval", "train")
    assert train == full[:6973] and validation == full[6973:] and len(test) == 1319        # file order, fixed
    assert validation[0].uid == "gsm8k-train-6973" and task.problems("validation", 2, 0) == validation[:2]
    assert not {p.prompt for p in validation} & {p.prompt for p in train}
    with pytest.raises(ValueError, match="benchmark math500 has no train file to hold out a validation split from"):
        make_task("math500", validation_size=10)
    with pytest.raises(ValueError, match="validation_size 7473 leaves no train problem of 7473"):
        make_task("gsm8k", validation_size=7473).problems("validation", None, 0)


@needs_data
def test_benchmark_reward_uses_the_verifier() -> None:
    task = make_task("gsm8k")
    problem = task.problems("eval", 1, seed=0)[0]  # gold 18
    assert task.reward("She makes 9 * 2 = 18 dollars, so \\boxed{18}.", problem) == 1.0
    assert task.reward("\\boxed{17}", problem) == 0.0


def test_missing_file_names_path_and_env_var(tmp_path: Path) -> None:
    task = BenchmarkTask("math500", data_dir=tmp_path)
    with pytest.raises(FileNotFoundError) as excinfo:
        task.problems("eval", None, seed=0)
    message = str(excinfo.value)
    assert str(tmp_path / "math500_test.jsonl") in message
    assert DATA_DIR_ENV in message and "\n" not in message


def test_data_dir_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"problem": "What is 1+1?", "answer": "2"}, {"problem": "What is 2+2?", "answer": "4"}]
    (tmp_path / "aime24_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    problems = make_task("aime24").problems("eval", None, seed=0)
    assert [(p.prompt, p.answer, p.uid) for p in problems] == [
        ("What is 1+1?" + PROMPT_SUFFIX, "2", "aime24-0"),
        ("What is 2+2?" + PROMPT_SUFFIX, "4", "aime24-1"),
    ]


# ---------------------------------------------------------------- registry


def test_registry_names_and_protocol() -> None:
    assert task_names() == ["addrev", "aime24", "amc23", "cumsum", "cumsum-long", "gsm8k", "math500", "minerva", "olympiadbench"]
    for name in task_names():
        task = make_task(name)
        assert isinstance(task, Task) and task.name == name
    assert make_task("addrev", eval_size=10).problems("eval", None, seed=0) == addrev_task(10).problems(
        "eval", None, seed=0
    )


def test_unknown_task_lists_valid_names() -> None:
    with pytest.raises(ValueError, match=r"unknown task 'gsm9k'; valid: addrev, aime24, .*olympiadbench"):
        make_task("gsm9k")


def test_the_task_registry_refuses_duplicates_and_unknown_settings() -> None:
    from harness.tasks import register_task, task_entry
    from harness.tasks.synthetic import addrev_task

    with pytest.raises(ValueError, match="task 'addrev' is already registered"):
        register_task("addrev", addrev_task)
    with pytest.raises(ValueError, match="unknown setting 'size'; valid: eval_size, data_dir, validation_size"):
        register_task("addrev-x", addrev_task, settings=("size",))
    entry = task_entry("addrev")
    assert entry.synthetic and entry.settings == ("eval_size",) and "".join(entry.vocab) == "0123456789+="
    assert not task_entry("gsm8k").synthetic and task_entry("gsm8k").settings == ("data_dir", "validation_size")
    assert task_entry("math500").settings == ("data_dir",)
