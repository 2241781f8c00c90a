"""Tests for the benchmark v2 task ``cumsum`` (harness/tasks/cumsum.py): generation, exact grading, eval set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.bases.models import _supervised_batch, accuracy_by_length, char_tokenizer, problems_sha256
from harness.tasks import Problem, make_task
from harness.tasks.cumsum import (CUMSUM_VOCAB, MAX_DIGITS, MIN_DIGITS, SLOTS, cumsum_answer, cumsum_prompt,
                                  cumsum_task, difficulty)

# The fixed eval set's identity: a change of the generator changes it (and check_eval_set then refuses the
# frozen v2 bases measured on the old one).
EVAL_2500_SHA256 = "ad2843de9991ec6be523192730bfaafeaf1b44e49910ebb29903433b4c773837"


@pytest.mark.parametrize(
    ("digits", "answer"),
    [
        ("37195", "30105"),  # 3; 3+7=10->0; 0+1=1; 1+9=10->0; 0+5=5
        ("00000", "00000"),  # all zeros stay zero
        ("99999", "98765"),  # 9; 18->8; 17->7; 16->6; 15->5
        ("12345", "13605"),  # 1; 1+2=3; 3+3=6; 6+4=10->0; 0+5=5
    ],
)
def test_cumsum_answer_hand_computed(digits: str, answer: str) -> None:
    assert cumsum_answer(digits) == answer


def test_cumsum_answer_long_hand_computed() -> None:
    # 20 digits 5,5,5,...: running sums 5, 10->0, 5, 0, ... alternate
    assert cumsum_answer("5" * 20) == "50" * 10
    # 1,2,...,9,0 twice: 1, 3, 6, 10->0, 5, 11->1, 8, 16->6, 15->5, 5,
    #                    then 6, 8, 11->1, 5, 10->0, 6, 13->3, 11->1, 10->0, 0
    assert cumsum_answer("1234567890" * 2) == "1360518655" + "6815063100"


def test_cumsum_prompt_is_a_fixed_width_register() -> None:
    assert cumsum_prompt("37195") == "37195" + "_" * 15 + "="
    assert len(cumsum_prompt("3" * MAX_DIGITS)) == SLOTS + 1 == 21
    assert cumsum_prompt("3" * 20) == "3" * 20 + "="


def test_cumsum_problems_are_self_consistent() -> None:
    task = cumsum_task(eval_size=300)
    for p in task.problems("eval", None, seed=0) + task.problems("train", 2000, seed=3):
        digits = p.prompt.rstrip("=").rstrip("_")
        assert p.prompt == cumsum_prompt(digits) and MIN_DIGITS <= len(digits) <= MAX_DIGITS
        assert p.answer == cumsum_answer(digits) and difficulty(p) == len(digits)
        assert p.uid == f"cumsum-{digits}" and set(p.prompt + p.answer) <= set(CUMSUM_VOCAB)


def test_cumsum_lengths_mix_every_difficulty() -> None:
    problems = cumsum_task().problems("eval", None, seed=0)
    lengths = [difficulty(p) for p in problems]
    assert set(lengths) == set(range(MIN_DIGITS, MAX_DIGITS + 1))
    # uniform on 5..20: mean 12.5 digits (+ <eos> = 13.5 response tokens); 2,500 draws: SD of the mean 0.09
    assert 12.2 < sum(lengths) / len(lengths) < 12.8


def test_cumsum_eval_is_fixed_distinct_and_seed_independent() -> None:
    task = cumsum_task()
    eval_a = task.problems("eval", None, seed=0)
    assert len(eval_a) == 2500 and len({p.uid for p in eval_a}) == 2500
    assert cumsum_task().problems("eval", None, seed=99) == eval_a
    assert task.problems("eval", 10, seed=0) == eval_a[:10]
    assert cumsum_task(eval_size=50).problems("eval", None, seed=0) == eval_a[:50]   # a prefix of one stream
    assert problems_sha256(eval_a) == EVAL_2500_SHA256


def test_cumsum_train_is_deterministic_distinct_and_disjoint_from_eval() -> None:
    task = cumsum_task()
    first = task.problems("train", 3000, seed=7)
    assert cumsum_task().problems("train", 3000, seed=7) == first
    assert task.problems("train", 3000, seed=8) != first
    assert len({p.uid for p in first}) == 3000
    eval_uids = {p.uid for p in task.problems("eval", None, seed=0)}
    # seed 20261201 is the eval stream's own seed: without the exclusion its train draw would be the eval set
    assert not eval_uids & {p.uid for p in task.problems("train", 3000, seed=20_261_201)}
    assert not eval_uids & {p.uid for p in first}


def test_cumsum_rejects_bad_split_and_sizes() -> None:
    task = cumsum_task(eval_size=20)
    with pytest.raises(ValueError, match="unknown split"):
        task.problems("test", None, seed=0)
    with pytest.raises(ValueError, match="eval size"):
        task.problems("eval", 21, seed=0)
    with pytest.raises(ValueError, match="eval_size"):
        cumsum_task(eval_size=0)


@pytest.mark.parametrize(
    ("completion", "reward"),
    [
        ("30105", 1.0),
        (" 30105\n", 1.0),  # surrounding whitespace is stripped
        ("30104", 0.0),  # the last running sum wrong
        ("40105", 0.0),  # the first wrong, the total right: the scratchpad is graded too
        ("3010", 0.0),  # stopped one digit early
        ("301050", 0.0),  # one digit too many
        ("5", 0.0),  # the total alone
        ("", 0.0),
        ("301 05", 0.0),  # inner whitespace is not stripped
    ],
)
def test_cumsum_reward_is_exact(completion: str, reward: float) -> None:
    problem = Problem(prompt=cumsum_prompt("37195"), answer="30105", uid="cumsum-37195")
    assert make_task("cumsum").reward(completion, problem) == reward


def test_supervised_batch_pads_variable_answers_and_labels_only_answers() -> None:
    tok = char_tokenizer(CUMSUM_VOCAB)                   # <pad> 0, <eos> 1, '0'..'9' 2..11, '_' 12, '=' 13
    short = Problem(cumsum_prompt("12345"), "13605", "cumsum-12345")
    long = Problem(cumsum_prompt("123456"), "136051", "cumsum-123456")
    ids, labels = _supervised_batch(tok, [short, long])
    assert ids.shape == labels.shape == (2, 21 + 6 + 1)  # prompt 21 + longest answer 6 + <eos>
    assert ids[0, 21:].tolist() == [3, 5, 8, 2, 7, 1, 0]    # "13605", <eos>, one <pad>
    assert labels[0].tolist() == [-100] * 21 + [3, 5, 8, 2, 7, 1, -100]
    assert labels[1].tolist() == [-100] * 21 + [3, 5, 8, 2, 7, 3, 1]


def test_accuracy_by_length_groups_by_answer_length() -> None:
    problems = [Problem("", "12345", "a"), Problem("", "12345", "b"), Problem("", "123456", "c")]
    assert accuracy_by_length(problems, [1.0, 0.0, 1.0]) == {"5": 0.5, "6": 1.0}


V2_BASES = sorted(p.name for p in (Path(__file__).resolve().parents[1] / "harness" / "bases").glob("tiny-cumsum-v2*"))


@pytest.mark.parametrize("name", V2_BASES)
def test_each_frozen_v2_base_matches_the_task_passed_its_probe_and_shares_the_recipe(name) -> None:
    """Every frozen v2 base: its files' sha256, the task's eval set, a passed probe, the recipe of
    tiny-cumsum-v2a but for the name and the warm-up seed, and its accepted line in candidates.jsonl."""
    from harness.bases import BASES_DIR, verify_base

    manifest = verify_base(BASES_DIR / name)                         # every file's sha256
    assert manifest["eval_size"] == 2500 and manifest["eval_set_sha256"] == EVAL_2500_SHA256
    probe, rule = manifest["probe"], manifest["probe"]["rule"]
    assert probe["accepted"] and probe["reasons"] == [] and rule["seeds"] >= 3
    finals = [run["curve"][-1][1] for run in probe["runs"]]
    assert probe["gain"] >= rule["min_gain"] and probe["seed_sd"] <= rule["max_seed_sd"]
    assert probe["zero_adv_frac"] <= rule["max_zero_adv"] and min(finals) > manifest["eval_acc"]
    candidates = [json.loads(line) for line in (BASES_DIR / "candidates.jsonl").read_text().splitlines()]
    mine = [c for c in candidates if c["name"] == name]
    assert len(mine) == 1 and mine[0]["accepted"] and mine[0]["sha256"] == manifest["sha256"]
    first = next(c for c in candidates if c["name"] == "tiny-cumsum-v2a")["recipe"]
    differs = {k for k in first.keys() | mine[0]["recipe"].keys() if first.get(k) != mine[0]["recipe"].get(k)}
    assert differs <= {"name", "warmup_seed"}
    v2_accepted = {c["recipe"]["warmup_seed"] for c in candidates if c["accepted"] and c["recipe"]["task"] == "cumsum"}
    assert len(V2_BASES) >= 2 and len(v2_accepted) == len(V2_BASES)


V3_BASES = sorted(p.name for p in (Path(__file__).resolve().parents[1] / "harness" / "bases").glob("tiny-cumsum-v3*"))


@pytest.mark.parametrize("name", V3_BASES)
def test_each_frozen_v3_base_passed_its_probe_on_validation_and_is_the_last_verdict_on_its_weights(name) -> None:
    """Every frozen v3 base: its files' sha256, cumsum-long's test set, a probe passed on the validation split
    at v3's temperature (docs/benchmark-v3.md §2), and the last line in candidates.jsonl on its weights accepted."""
    from harness.bases import BASES_DIR, verify_base

    manifest = verify_base(BASES_DIR / name)
    assert manifest["recipe"]["task"] == "cumsum-long" and manifest["eval_size"] == 2500
    probe, rule = manifest["probe"], manifest["probe"]["rule"]
    assert probe["accepted"] and rule["split"] == "validation" and rule["temperature"] == 0.8
    assert probe["gain"] >= rule["min_gain"] and probe["seed_sd"] <= rule["max_seed_sd"]
    assert probe["zero_adv_frac"] <= rule["max_zero_adv"]
    candidates = [json.loads(line) for line in (BASES_DIR / "candidates.jsonl").read_text().splitlines()]
    mine = [c for c in candidates if c.get("sha256") == manifest["sha256"]]
    assert mine[-1]["accepted"] and mine[-1]["name"] == name and mine[-1]["recipe"] == manifest["recipe"]


# cumsum-long (benchmark v3): the same task at 24-96 digits, with a validation split.

def test_cumsum_long_is_in_the_long_trajectory_regime() -> None:
    task = make_task("cumsum-long")
    problems = task.problems("eval", None, seed=0)
    lengths = [len(p.answer) + 1 for p in problems]              # response tokens, <eos> included
    assert len(problems) == 2500 and task.max_response_tokens == 97 == max(lengths)
    assert min(lengths) == 25 and 59 < sum(lengths) / len(lengths) < 63   # uniform 24..96 digits: mean 61
    for p in problems[:200]:
        digits = p.prompt.rstrip("=").rstrip("_")
        assert p.prompt == cumsum_prompt(digits, 96) and len(p.prompt) == 97
        assert p.answer == cumsum_answer(digits) and p.uid == f"cumsum-long-{digits}"


def test_cumsum_long_splits_are_disjoint_and_fixed() -> None:
    task = make_task("cumsum-long", eval_size=300)
    test, validation = task.problems("eval", None, 0), task.problems("validation", None, 0)
    train = task.problems("train", 3000, seed=5)
    prompts = [{p.prompt for p in split} for split in (test, validation, train)]
    assert (len(test), len(validation)) == (300, 1000) and all(len(s) == n for s, n in zip(prompts, (300, 1000, 3000)))
    assert not prompts[0] & prompts[1] and not prompts[2] & (prompts[0] | prompts[1])
    assert task.problems("validation", 10, seed=9) == validation[:10]          # the seed does not pick it
    assert problems_sha256(task.problems("validation", None, 1)) == problems_sha256(validation)
    assert problems_sha256(validation) != problems_sha256(test)


def test_cumsum_has_no_validation_split_and_keeps_its_train_draws() -> None:
    task = cumsum_task(eval_size=300)
    assert task.splits == ("train", "eval")
    with pytest.raises(ValueError, match="task cumsum has no validation split"):
        task.problems("validation", None, 0)
    # v2's train draw skips the eval split only (unchanged by cumsum-long's validation split)
    assert problems_sha256(task.problems("train", 64, seed=3))[:16] == "488d7ab53ce67484"   # the draw before v3
