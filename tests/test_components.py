"""Components chosen by name with their own settings (harness/config/components.py): the old keys read
into their places, the stored form in the old shape, and the refusals of what no component reads, each
one line naming the fix."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.components import LEGACY, Choice
from harness.config.dicts import from_dict, to_dict
from harness.config.run import RunConfig, build_run_config
from harness.errors import ConfigError
from harness.registry import BACKENDS, ENGINES, SOURCES
from harness.store import trialdir
from harness.store.archive import committed_results

ROOT = Path(__file__).resolve().parents[1]
REPORTS = sorted(p.parent for p in (ROOT / "reports").glob("*/raw*.tar.gz"))


def sha(config: dict) -> str:
    return trialdir.config_sha256(to_dict(build_run_config(config)))


@pytest.mark.parametrize("report", REPORTS, ids=lambda p: p.name)
def test_every_stored_config_reads_back_to_itself(report):
    """Round trip: a committed trial's config.yaml, parsed with the old keys mapped, has the stored form
    it was written with (train.updates_per_batch read as train.passes, as before)."""
    with committed_results(report) as committed:
        stored = [trialdir.upgraded(trialdir.read_config(p.parent)) for p in committed.glob(f"*/{trialdir.CONFIG}")]
    assert stored
    for config in stored:
        assert to_dict(from_dict(RunConfig, config)) == config


def test_a_component_block_hashes_as_the_old_keys_it_replaces():
    new_old = [({"engine": {"vllm": {"gpu_memory_utilization": 0.35}}},
                {"model": {"engine": "vllm", "gpu_memory_utilization": 0.35}}),
               ({"backend": {"deepspeed": {"zero_stage": 2, "zero_offload": True}}},
                {"model": {"backend": "deepspeed", "zero_stage": 2, "zero_offload": True}}),
               ({"forward": "lean", "behavior_logp": "recompute"},
                {"model": {"forward": "lean", "behavior_logp": "recompute"}}),
               ({"staleness": {"async": {"max_staleness": 2}}}, {"async": {"max_staleness": 2}})]
    for new, old in new_old:
        assert sha(new) == sha(old), new
    stored = to_dict(build_run_config(new_old[0][0]))
    assert stored["model"]["engine"] == "vllm" and stored["model"]["gpu_memory_utilization"] == 0.35
    assert "components" not in stored and "engine" not in stored
    assert to_dict(build_run_config({"staleness": "async"}))["async"] == {"max_staleness": 1}
    assert sha({"engine": "vllm"}) == sha({"engine": {"vllm": {"gpu_memory_utilization": 0.3}}})    # its default


def test_the_settings_classes_default_to_the_old_keys_defaults():
    """What a config of another component stored (LEGACY's default) is the component's own default, so a
    config that names the component without settings keeps its identity."""
    for legacy in LEGACY:
        registry = {"engine": ENGINES, "backend": BACKENDS}[legacy.kind]
        assert getattr(registry.settings(legacy.component)(), legacy.setting) == legacy.default, legacy
    assert SOURCES.settings("async")().max_staleness == 1 and ENGINES.settings("hf") is None


@pytest.mark.parametrize("config, says", [
    ({"model": {"zero_stage": 3}}, "model.zero_stage: 3 is read by backend deepspeed only; remove it, or set backend: "
                                   "{deepspeed: {zero_stage: 3}}"),
    ({"model": {"backend": "torch", "zero_offload": True}}, "model.zero_offload: True is read by backend deepspeed only"),
    ({"model": {"engine": "hf", "gpu_memory_utilization": 0.5}}, "model.gpu_memory_utilization: 0.5 is read by engine "
                                                                 "vllm only; remove it, or set engine: {vllm: "
                                                                 "{gpu_memory_utilization: 0.5}}"),
    ({"engine": "vllm", "model": {"engine": "vllm"}}, "model.engine and engine: one setting written under its old key "
                                                      "and its new one; keep engine"),
    ({"engine": {"vllm": {"gpu_memory_utilization": 0.5}}, "model": {"gpu_memory_utilization": 0.4}},
     "model.gpu_memory_utilization and engine.vllm.gpu_memory_utilization: one setting written under its old key "
     "and its new one; keep engine.vllm.gpu_memory_utilization"),
    ({"async": {"max_staleness": 2}, "staleness": "async"}, "async and staleness: one setting written under its old "
                                                            "key and its new one; keep staleness"),
    ({"backend": {"torch": {"zero_stage": 3}}}, "backend.torch: takes no settings; remove the mapping (backend: torch)"),
    ({"engine": {"hf": {}}, "forward": {"lean": {"x": 1}}}, "forward.lean: takes no settings; remove the mapping"),
    ({"backend": {"deepspeed": {"zero_stage": 5}}}, "backend.deepspeed.zero_stage: must be 0, 1, 2 or 3; got 5"),
    ({"engine": {"vllm": {"gpu_memory_utilization": 1.5}}}, "engine.vllm.gpu_memory_utilization: a share of the GPU's "
                                                            "memory, in (0, 1]; got 1.5"),
    ({"engine": {"vllm": {"gpu_memory": 0.5}}}, "engine.vllm.gpu_memory: unknown key; valid keys: "
                                                "gpu_memory_utilization"),
    ({"engine": {"hf": {}, "vllm": {}}}, "base.engine: a rollout engine's name, or a mapping of one name to its "
                                         "settings"),
    ({"engine": None}, "base.engine: a rollout engine's name"),
    ({"engine": "nope"}, "engine: 'nope' is not valid; choose one of hf, vllm"),
    ({"components": {"engine": {"vllm": {"gpu_memory_utilization": 0.5}}}},
     "components.engine.vllm.gpu_memory_utilization: a setting of engine vllm, which is not the chosen engine; "
     "remove it, or set engine: vllm"),
])
def test_what_no_chosen_component_reads_is_refused_in_one_line(config, says):
    with pytest.raises(ConfigError) as err:
        build_run_config(config)
    assert str(err.value).startswith(says) and "\n" not in str(err.value)


def test_an_old_key_at_its_old_default_is_dropped_silently_and_old_overrides_still_apply():
    stored_shape = {"model": {"engine": "hf", "backend": "torch", "zero_stage": 0, "zero_offload": False,
                              "gpu_memory_utilization": 0.3}}
    assert sha(stored_shape) == sha({})
    cfg = build_run_config({}, {"model.engine": "vllm", "model.gpu_memory_utilization": 0.4})    # --set, a grid
    assert cfg.engine == Choice("vllm", "engine", {"gpu_memory_utilization": 0.4})
    assert cfg.engine.settings.gpu_memory_utilization == 0.4


# ---------------------------------------------------------------- capabilities, asked instead of names

@pytest.fixture
def plugins(monkeypatch):
    """Plugin components with the other answer to each capability than the built-in of the same role."""
    from harness.registry import FORWARDS
    from harness.rollout.base import Engine, Forward
    from harness.trial.backends import TorchBackend

    hf, lean = FORWARDS.get("hf"), FORWARDS.get("lean")
    inproc = ENGINES.get("hf").build
    for registry, extra in ((ENGINES, {"sampler": Engine(inproc, in_process=True, supports_mismatch=True,
                                                         multi_worker=True),
                                       "remote": inproc}),                 # a plain factory declares nothing
                            (BACKENDS, {"ownstep": type("OwnStep", (TorchBackend,), {}),
                                        "opaque": type("Opaque", (TorchBackend,), {"custom_forward": False})}),
                            (FORWARDS, {"mine": Forward(hf.response_logits, hf.engine),
                                        "mine_fused": Forward(hf.response_logits, hf.engine, fused_adamw=True),
                                        "mine_switching": Forward(lean.response_logits, lean.engine, engine_version=2,
                                                                  switches_weights=True),
                                        "mine_ckpt": Forward(hf.response_logits, hf.engine, checkpointing=True)})):
        registry.names()
        monkeypatch.setattr(registry, "_entries", {**registry._entries, **extra})


def refusal(config: dict) -> str | None:
    try:
        build_run_config(config)
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return str(exc)
    return None


def test_an_engine_declares_in_process_supports_mismatch_and_multi_worker(plugins, tiny_base):
    lean_on = {"forward": "lean"}
    assert refusal({**lean_on, "engine": "sampler"}) is None
    assert refusal({**lean_on, "engine": "remote"}).startswith("forward: 'lean' is written for Qwen3 models like the "
                                                               "tiny bases, in float32 with an in-process engine")
    assert refusal({"engine": "sampler", "mismatch": {}}) is None
    assert refusal({"engine": "remote", "mismatch": {}}).startswith("mismatch: the mismatched engine stands in for an "
                                                                    "in-process engine (hf), not 'remote'")
    workers = {"train": {"workers": 2, "prompts_per_step": 16}}
    assert refusal({**workers, "engine": "sampler"}) is None
    assert refusal({**workers, "engine": "remote"}).startswith("train.workers: engine 'remote' is not supported with "
                                                               "several workers")


def test_a_backend_declares_whether_it_runs_the_configured_forward(plugins):
    assert refusal({"forward": "lean", "backend": "ownstep"}) is None
    assert refusal({"forward": "lean", "backend": "opaque"}).endswith("backend 'opaque'")


def test_a_forward_declares_fused_adamw_switching_and_checkpointing(plugins, tiny_base):
    import torch
    from harness.trial.backends import make_backend

    model = torch.nn.Linear(2, 2)
    fused = [make_backend(model, build_run_config({"forward": f}), micro_batches=1).opt.defaults["fused"]
             for f in ("mine", "mine_fused")]
    assert fused == [None, True]
    inflight = {"inflight": {}, "delay": 2, "train": {"max_new_tokens": 8}}
    assert refusal({**inflight, "forward": "mine_switching"}) is None
    assert refusal({**inflight, "forward": "mine"}).startswith("inflight: needs an engine that switches weights "
                                                              "mid-response")
    assert refusal({"forward": "mine_ckpt", "model": {"gradient_checkpointing": True}}) is None
    assert refusal({"forward": "mine", "model": {"gradient_checkpointing": True}}).startswith(
        "model.gradient_checkpointing: checkpoints transformers' layers, which forward 'mine' does not run")


def test_the_dry_run_asks_the_forward_for_its_speedup_and_its_own_figures(plugins, tmp_path):
    """plan.py keyed by no forward's name: a plugin forward with lean's speed-up is costed as lean is, one with
    its own measured figures by them, one with neither as the transformers forward."""
    from types import SimpleNamespace

    from harness.registry import FORWARDS
    from harness.rollout.base import Forward
    from harness.suite.plan import TINY_STEP_S, _step_seconds

    hf = FORWARDS.get("hf")
    FORWARDS._entries.update(fast=Forward(hf.response_logits, hf.engine, speedup={"cumsum": 2.0}),
                             timed=Forward(hf.response_logits, hf.engine, engine_version=7, step_s={"cumsum": 0.5}))
    base = {"model": {"base": "tiny-cumsum-v2a"}, "task": {"name": "cumsum"}, "train": {"prompts_per_step": 16}}
    cost = {f: _step_seconds(tmp_path, [SimpleNamespace(trial_id="t", config=build_run_config({**base, "forward": f}))])
            for f in ("hf", "mine", "fast", "timed")}
    assert cost["hf"][0] == cost["mine"][0] == pytest.approx(2 * cost["fast"][0])      # 16 x 8 = 128 responses
    assert " x 0.50 for the fast forward" in cost["fast"][1] and "forward" not in cost["mine"][1].split(")")[-1]
    assert cost["timed"][0] == 0.5 and "on engine 7" in cost["timed"][1] and TINY_STEP_S["cumsum"] == 0.371


def test_a_model_kind_is_asked_for_its_settings_identity_eval_set_and_cost(monkeypatch, tmp_path):
    """No kind name outside bases/sources.py: a plugin kind of starting model validates its own settings, names
    its checkpoint and is costed by what it declares."""
    from types import SimpleNamespace

    from harness.bases import base_identity
    from harness.bases.sources import ModelSource
    from harness.registry import MODELS
    from harness.suite.plan import _step_seconds

    def needs_path(model, key):
        if model.path is None:
            raise ConfigError(f"{key}.path: the zoo's model name; set it")

    MODELS.names()
    zoo = ModelSource(needs_path, lambda model: (tmp_path, {"name": f"zoo:{model.path}", "sha256": "0" * 64}))
    monkeypatch.setattr(MODELS, "_entries", {**MODELS._entries, "zoo": zoo})
    assert refusal({"model": {"kind": "zoo"}}) == "model.path: the zoo's model name; set it"
    assert refusal({"model": {"kind": "nope"}}) == "model.kind: 'nope' is not valid; choose one of tiny, path, zoo"
    # a model directory given to the tiny kind would train the frozen base instead, silently: refused
    assert refusal({"model": {"path": "/models/qwen3"}}) == (
        "model.path: read by model.kind path only (here kind is 'tiny', the frozen base 'tiny-addrev-v1'); set "
        "model.kind: path to train the model there, or remove model.path")
    cfg = build_run_config({"model": {"kind": "zoo", "path": "m1"}, "task": {"name": "cumsum"}})
    assert base_identity(cfg.model) == (tmp_path, {"name": "zoo:m1", "sha256": "0" * 64})
    assert _step_seconds(tmp_path, [SimpleNamespace(trial_id="t", config=cfg)]) == (None, "")   # not measured
    tiny = build_run_config({"model": {"base": "tiny-cumsum-v2a"}, "task": {"name": "cumsum"}})
    assert _step_seconds(tmp_path, [SimpleNamespace(trial_id="t", config=tiny)])[0] > 0          # measured


def test_a_task_setting_the_task_does_not_read_is_refused():
    """Else it is ignored without a word: data files given to a task that generates its problems."""
    assert refusal({"task": {"name": "cumsum", "data_dir": "/data"}}) == (
        "task.data_dir: task 'cumsum' generates its problems and reads no files (the benchmark tasks, e.g. gsm8k, "
        "read them); remove it, or set task.name to a benchmark")
    assert refusal({"task": {"name": "cumsum", "validation_size": 10}}).startswith("task.validation_size: task 'cumsum'")
    assert refusal({"task": {"name": "gsm8k", "data_dir": "/data"}}) is None          # a benchmark reads it


def test_vllm_and_deepspeed_are_built_from_their_own_settings(monkeypatch):
    """Neither is installed here: stand-ins record what the registered components pass them."""
    import importlib.util
    import sys
    import types

    import torch
    from harness.rollout import EngineSettings, make_engine
    from harness.trial.backends import make_backend

    seen = {}

    class FakeVLLM:
        def __init__(self, path, tokenizer, dtype, gpu_memory_utilization, seed, colocated):
            seen["gpu_memory_utilization"], seen["colocated"] = gpu_memory_utilization, colocated

        def sync_weights(self, model, version):
            pass

    def initialize(model, optimizer, config):
        seen["zero_optimization"] = config["zero_optimization"]
        return types.SimpleNamespace(module=model), optimizer, None, None

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else find_spec(name, *a))
    monkeypatch.setitem(sys.modules, "harness.rollout.vllm_engine", types.SimpleNamespace(VLLMEngine=FakeVLLM))
    monkeypatch.setitem(sys.modules, "deepspeed", types.SimpleNamespace(init_distributed=lambda **k: None,
                                                                         initialize=initialize))
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "0")
    cfg = build_run_config({"engine": {"vllm": {"gpu_memory_utilization": 0.35}},
                            "backend": {"deepspeed": {"zero_stage": 2, "zero_offload": True}}})
    make_engine(cfg.engine.name, torch.nn.Linear(2, 2), None, None,
                EngineSettings(cfg.forward.name, cfg.model.dtype, cfg.engine.settings))
    make_backend(torch.nn.Linear(2, 2), cfg, micro_batches=1)
    assert seen == {"gpu_memory_utilization": 0.35, "colocated": False,       # a CPU model: the engine is not put to sleep
                    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
