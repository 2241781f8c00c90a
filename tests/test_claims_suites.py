"""The claims audit's pre-registered suites (docs/claims.md): the four group-size suites differ only where
the design says they may, and every claims suite keeps the v2 reference's base block."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

SUITES = Path(__file__).resolve().parents[1] / "suites"
G_SUITES = {4: "claims-g4.yaml", 8: "claims-g8.yaml", 16: "claims-g16.yaml", 32: "claims-g32.yaml"}
RESPONSES_PER_STEP = 128              # the reference's 8 prompts x G = 16, held equal across G


def _load(name: str) -> dict:
    return yaml.safe_load((SUITES / name).read_text(encoding="utf-8"))


def _without(suite: dict, *dotted: str) -> dict:
    out = yaml.safe_load(yaml.safe_dump(suite))
    for key in dotted:
        *path, last = key.split(".")
        node = out
        for part in path:
            node = node[part]
        node.pop(last, None)
    return out


def test_group_size_suites_differ_only_in_g_prompts_name_and_tuned_lrs():
    free = ("suite", "notes", "overrides", "base.group_size", "base.train.prompts_per_step")
    suites = {G: _load(name) for G, name in G_SUITES.items()}
    first = _without(suites[4], *free)
    for G, suite in suites.items():
        assert suite["base"]["group_size"] == G
        assert suite["base"]["train"]["prompts_per_step"] * G == RESPONSES_PER_STEP     # the same budget per step
        assert _without(suite, *free) == first, f"claims-g{G}.yaml differs from claims-g4.yaml outside {free}"


@pytest.mark.parametrize("name", ["claims-eps.yaml", *G_SUITES.values()])
def test_claims_suites_keep_the_reference_v2_base_block(name):
    ref, suite = _load("reference-v2.yaml")["base"], _load(name)["base"]
    assert _without({"base": suite}, "base.group_size", "base.train.prompts_per_step") == \
        _without({"base": ref}, "base.group_size", "base.train.prompts_per_step")
    assert set(_load(name)["seeds"]).isdisjoint({*range(8), *range(100, 108), 1007})      # never reported seeds
