"""The run config's components, each chosen by name with its own settings, and the one mapping between the
keys a suite writes and the stored form every committed trial's identity is computed from.

A run config has one key per kind of component, whose value is the component's name alone, or a mapping of
one name to its settings (the settings class registered with it: harness/registry.py `register(name,
settings=)`):

    engine: {vllm: {gpu_memory_utilization: 0.35}}     # or: engine: hf
    forward: lean3
    backend: {deepspeed: {zero_stage: 2}}              # or: backend: torch
    staleness: {async: {max_staleness: 2}}             # none: the delay law (delay:) picks the source

Each is a `Choice`. Its settings are built from the registered class when first read, not when the config is
parsed, so a torch-free reader (the suite schema, the report) parses a config without importing the component.

The keys written before components had settings are still read (`current`, applied to every mapping a run
config is built from: a suite's base, `--set`, an overrides file, a stored config.yaml): `model.engine`,
`model.forward`, `model.behavior_logp`, `model.backend` move to the top, `model.gpu_memory_utilization` and
`model.zero_stage`/`zero_offload` into the component that reads them (LEGACY), `async:` into `staleness`.

The stored form (`stored_dict`: config.yaml, config_sha256, config_changes, the MLflow params) is the shape
trials were written in: the model section keeps its twelve keys and `async` its section, so every committed
trial hashes as before; a setting without an old key (a plugin's) goes under `components: {kind: {name:
{setting: value}}}` while it differs from its default, and a staleness source other than async under
`staleness:`. So `stored_dict(parse(stored_dict(c))) == stored_dict(c)`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from harness.config.dicts import PARSE, fields_dict, from_dict, to_dict
from harness.errors import ConfigError
from harness.registry import BACKENDS, ENGINES, FORWARDS, SOURCES, Registry, claimant
from harness.store.untrusted import short

COMPONENTS: dict[str, Registry] = {"engine": ENGINES, "forward": FORWARDS, "backend": BACKENDS, "staleness": SOURCES}
MOVED = ("engine", "forward", "behavior_logp", "backend")      # model.<key> -> <key>, in the stored model's order


@dataclass(frozen=True)
class Legacy:
    """A component's setting that was a key of the model section: where it goes, and its old default (what
    every config of another component stored; dropped silently when read at that value)."""
    kind: str                              # the run config's component key
    component: str                         # the registered component whose settings hold it
    setting: str                           # its name there and under model:
    default: Any


LEGACY = (Legacy("backend", "deepspeed", "zero_stage", 0), Legacy("backend", "deepspeed", "zero_offload", False),
          Legacy("engine", "vllm", "gpu_memory_utilization", 0.3))
ASYNC = "async"                            # the old `async:` section is staleness source async's settings
MODEL_ORDER = ("kind", "base", "path", "dtype", "device", *MOVED, "zero_stage", "zero_offload", "gpu_memory_utilization")


@dataclass(frozen=True)
class Choice:
    """One component of kind `kind` (a key of COMPONENTS), by its registered name, with the settings written
    for it (`given`, a mapping of its settings class's fields; empty: its defaults)."""
    name: str
    kind: str
    given: Mapping[str, Any] = field(default_factory=dict)   # read only (a plain dict: a config is pickled)

    @property
    def registry(self) -> Registry:
        return COMPONENTS[self.kind]

    @property
    def settings(self) -> Any:
        """The component's settings object (None: it takes none)."""
        cls = self.registry.settings(self.name, self.kind)
        return None if cls is None else from_dict(cls, self.given, f"{self.kind}.{self.name}")

    def validate(self, key: str) -> None:
        self.registry.check(key, self.name)
        if self.registry.settings(self.name) is None and self.given:
            raise ConfigError(f"{key}.{self.name}: takes no settings; remove the mapping ({key}: {self.name})")
        settings = self.settings
        if hasattr(settings, "validate"):
            settings.validate(f"{key}.{self.name}")

    def stored_dict(self, every_key: bool = False) -> Any:
        return {self.name: dict(self.given)} if self.given else self.name


def parse_choice(kind: str, value: Any, key: str, nullable: bool = False) -> Choice | None:
    """The Choice a suite writes for `kind`: a name, or a mapping of one name to its settings (None, where
    `nullable`: none chosen). The name is checked against the registry when the config is validated."""
    if (value is None and nullable) or isinstance(value, Choice):
        return value
    if isinstance(value, str):
        return Choice(value, kind)
    if isinstance(value, Mapping) and len(value) == 1 and isinstance(next(iter(value)), str):
        (name, given), = value.items()
        if not isinstance(given, (Mapping, type(None))):
            raise ConfigError(f"{key}.{name}: expected a mapping of its settings; got {short(given)}")
        return Choice(name, kind, dict(given or {}))
    raise ConfigError(f"{key}: a {COMPONENTS[kind].kind}'s name, or a mapping of one name to its settings "
                      f"({key}: {{name: {{setting: value}}}}); got {short(value)}")


def component(kind: str, default: str | None) -> Any:
    """The dataclass field of a run config's component `kind` (parsed by parse_choice)."""
    parse = {PARSE: lambda value, key: parse_choice(kind, value, key, nullable=default is None)}
    return field(default=None, metadata=parse) if default is None else \
        field(default_factory=lambda: Choice(default, kind), metadata=parse)


def can(choice: Choice, capability: str) -> bool:
    """Whether the chosen component declares `capability` (an attribute of its registry entry: rollout/base.py
    Forward and Engine, a backend's class); one that does not declare it lacks it."""
    return bool(getattr(choice.registry.get(choice.name, choice.kind), capability, False))


def source_of(cfg: Any) -> Any:
    """The staleness source that serves run config `cfg`: the one it names (staleness:), else the last
    registered one that claims it (the delay law's: exact, mixed, in-flight)."""
    return SOURCES.get(cfg.staleness.name, "staleness") if cfg.staleness is not None else claimant(SOURCES, cfg)


# ----------------------------------------------------------------------------------------------------------
# Reading: the old keys mapped to their places
# ----------------------------------------------------------------------------------------------------------

def current(data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` (a run config as written or stored) with the old keys moved to their places (the module's
    docstring); one line when a setting is written under its old and its new key, or given to a component
    that does not read it."""
    out = dict(data)
    model = out.get("model")
    if isinstance(model, Mapping):
        model = dict(model)
        for name in MOVED:
            if name in model:
                out[name] = _once(out, name, f"model.{name}", model.pop(name))
        for legacy in LEGACY:
            if legacy.setting in model:
                _place(out, legacy, model.pop(legacy.setting))
        out["model"] = model
    if ASYNC in out:
        section = out.pop(ASYNC)
        if section is not None:
            out["staleness"] = _once(out, "staleness", ASYNC, {ASYNC: section})
    for kind, chosen in _mapping(out.pop("components", None), "components").items():
        for name, settings in _mapping(chosen, f"components.{kind}").items():
            for setting, value in _mapping(settings, f"components.{kind}.{name}").items():
                out[kind] = _with(out.get(kind), kind, name, setting, value, f"components.{kind}.{name}.{setting}")
    return out


def _mapping(value: Any, key: str) -> dict[str, Any]:
    if value is not None and not isinstance(value, Mapping):
        raise ConfigError(f"{key}: expected a mapping; got {short(value)}")
    return dict(value or {})


def _once(out: Mapping[str, Any], new: str, old: str, value: Any) -> Any:
    if new in out:
        raise ConfigError(f"{old} and {new}: one setting written under its old key and its new one; keep {new}")
    return value


def _name(value: Any) -> Any:
    return next(iter(value), None) if isinstance(value, Mapping) else value


def _place(out: dict[str, Any], legacy: Legacy, value: Any) -> None:
    """Old key model.<setting> into the settings of the component that reads it, when it is the chosen one."""
    old = f"model.{legacy.setting}"
    if _name(out.get(legacy.kind)) == legacy.component:
        out[legacy.kind] = _with(out[legacy.kind], legacy.kind, legacy.component, legacy.setting, value, old)
    elif not (value == legacy.default and type(value) is type(legacy.default)):
        raise ConfigError(f"{old}: {short(value)} is read by {legacy.kind} {legacy.component} only; remove it, or "
                          f"set {legacy.kind}: {{{legacy.component}: {{{legacy.setting}: {short(value)}}}}}")


def _with(chosen: Any, kind: str, name: str, setting: str, value: Any, old: str) -> Any:
    """Choice `chosen` (as written) with `setting` added to component `name`'s settings."""
    if _name(chosen) != name:
        raise ConfigError(f"{old}: a setting of {kind} {name}, which is not the chosen {kind}; remove it, or set "
                          f"{kind}: {name}")
    given = dict(chosen[name] or {}) if isinstance(chosen, Mapping) else {}
    new = f"{kind}.{name}.{setting}"
    if setting in given:
        raise ConfigError(f"{old} and {new}: one setting written under its old key and its new one; keep {new}")
    return {name: {**given, setting: value}}


# ----------------------------------------------------------------------------------------------------------
# Writing: the stored form
# ----------------------------------------------------------------------------------------------------------

def stored_dict(cfg: Any, every_key: bool = False) -> dict[str, Any]:
    """The stored form of run config `cfg` (the module's docstring): the dict of config.yaml and of
    config_sha256, in the shape trials were written in."""
    out: dict[str, Any] = {}
    for key, value in fields_dict(cfg, every_key, skip=MOVED).items():
        out.update(_stored_staleness(cfg.staleness, every_key) if key == "staleness" else {key: value})
    out["model"] = _stored_model(cfg, out["model"])
    own = {kind: {getattr(cfg, kind).name: settings} for kind in MOVED if kind in COMPONENTS
           if (settings := _own_settings(getattr(cfg, kind), every_key))}
    return {**out, **({"components": own} if own else {})}


def _stored_model(cfg: Any, model: dict[str, Any]) -> dict[str, Any]:
    moved = {"engine": cfg.engine.name, "forward": cfg.forward.name, "behavior_logp": cfg.behavior_logp,
             "backend": cfg.backend.name}
    for legacy in LEGACY:
        choice = getattr(cfg, legacy.kind)
        own = choice.name == legacy.component and choice.given
        moved[legacy.setting] = getattr(choice.settings, legacy.setting) if own else legacy.default
    model = {**model, **moved}
    return {**{k: model[k] for k in MODEL_ORDER}, **{k: v for k, v in model.items() if k not in MODEL_ORDER}}


def _stored_staleness(choice: Choice | None, every_key: bool) -> dict[str, Any]:
    """`async:` as stored (its section, or None), and `staleness:` for a source that has no old key."""
    if choice is None:
        return {ASYNC: None}
    if choice.name == ASYNC:
        return {ASYNC: to_dict(choice.settings)}
    own = _own_settings(choice, every_key)
    return {ASYNC: None, "staleness": {choice.name: own} if own else choice.name}


def _own_settings(choice: Choice, every_key: bool) -> dict[str, Any]:
    """The settings of `choice` that no old key holds, while they differ from their defaults (all of them
    with `every_key`); {} for a component without settings or without such settings given."""
    old = {legacy.setting for legacy in LEGACY if legacy.component == choice.name}
    if not set(choice.given) - old:
        return {}
    now, default = to_dict(choice.settings), to_dict(type(choice.settings)())
    return {k: v for k, v in now.items() if k not in old and (every_key or v != default[k])}
