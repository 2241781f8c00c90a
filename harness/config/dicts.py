"""Config dataclasses <-> plain dicts: YAML key names, type checks and coercion (`from_dict`), the inverse
(`to_dict`), dotted overrides (`set_dotted`) and the flat dotted view (`flatten`). Generic over the dataclasses
of harness/config/run.py; every problem is a one-line ConfigError naming the key."""
from __future__ import annotations

import collections.abc
import dataclasses
import math
import types
import typing
from dataclasses import fields
from typing import Any, Mapping

from harness.errors import ConfigError
from harness.store.trialdir import RENAMED_KEYS
from harness.store.untrusted import short

# Field metadata of a setting added after trials were committed: `to_dict` leaves it out while it is at its
# default, so every config that does not use it resolves, and hashes (config_sha256), as before it existed.
OMIT_AT_DEFAULT = "omit_at_default"
INT64 = 2 ** 63                            # an integer setting is a 64-bit integer wherever torch or numpy hold it
NEW_SETTING = {OMIT_AT_DEFAULT: True}
# Field metadata: a function (value, key) -> the field's value, read instead of the annotation's coercion
# (a component chosen by name with its settings: config/components.py).
PARSE = "parse"
# What a user who still writes a renamed setting (store/trialdir.py RENAMED_KEYS) is told, by its new name.
RENAMED_WHY = {"train.passes": "(full passes over each batch, what it meant); for several minibatch updates "
                               "per batch, each response used once, set train.minibatches"}


def yaml_name(f: dataclasses.Field) -> str:
    return f.name.rstrip("_")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp)).replace("typing.", "")


def _coerce(key: str, tp: Any, value: Any) -> Any:
    """Check `value` against the annotation `tp` (after `from __future__ import annotations`)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(key, arg, value)
            except ConfigError as exc:   # a mapping's error is the section's (e.g. delay: {dist: ...})
                section = dataclasses.is_dataclass(arg) and isinstance(value, Mapping)
                errors.insert(0 if section else len(errors), str(exc))
        raise ConfigError(errors[0] if errors else f"{key}: may not be null")
    if dataclasses.is_dataclass(tp):
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping of {', '.join(yaml_name(f) for f in fields(tp))}; got {value!r}")
        return from_dict(tp, value, key)
    if origin in (collections.abc.Mapping, dict) or tp in (Mapping, dict):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping; got {value!r}")
        return types.MappingProxyType(dict(value))
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list; got {value!r}")
        (inner, _) = typing.get_args(tp)
        return tuple(_coerce(f"{key}[{i}]", inner, v) for i, v in enumerate(value))
    if tp is float and not isinstance(value, bool):
        number = value
        if isinstance(value, str):
            try:                               # YAML reads 1e-4 (no dot) as a string
                number = float(value)
            except ValueError:
                pass
        if isinstance(number, (int, float)):
            if not math.isfinite(number):
                raise ConfigError(f"{key}: must be a finite number; got {value!r}")
            return float(number)
    if tp is int and isinstance(value, int) and not isinstance(value, bool) and not -INT64 <= value < INT64:
        raise ConfigError(f"{key}: {short(value, 40)} does not fit a 64-bit integer (torch and numpy hold it as one); "
                          f"use a value below 2**63")
    if tp is Any or (isinstance(tp, type) and isinstance(value, tp) and not (tp is int and isinstance(value, bool))):
        return value
    raise ConfigError(f"{key}: expected {_type_name(tp)}; got {value!r}")


def from_dict(cls: type, data: Mapping[str, Any], key: str = "base") -> Any:
    """Build dataclass `cls` from a mapping, refusing unknown keys and wrong types. A class whose keys moved
    maps the old ones first (`cls.current(data)`: the run config, config/components.py)."""
    if hasattr(cls, "current"):
        data = cls.current(data)
    hints = typing.get_type_hints(cls)
    by_yaml = {yaml_name(f): f for f in fields(cls)}
    unknown = sorted(set(data) - set(by_yaml))
    renamed = [(old, new) for old, new in RENAMED_KEYS.items() for name in unknown if f"{key}.{name}".endswith(old)]
    if renamed:
        old, new = renamed[0]
        raise ConfigError(f"{key}.{old.split('.')[-1]}: renamed {new} {RENAMED_WHY[new]}")
    if unknown:
        raise ConfigError(f"{key}.{unknown[0]}: unknown key; valid keys: {', '.join(sorted(by_yaml))}")
    kwargs = {f.name: f.metadata[PARSE](data[name], f"{key}.{name}") if PARSE in f.metadata else
              _coerce(f"{key}.{name}", hints[f.name], data[name]) for name, f in by_yaml.items() if name in data}
    return cls(**kwargs)


def to_dict(obj: Any, every_key: bool = False) -> Any:
    """Plain nested dict/list view of a config, with YAML key names (the inverse of from_dict). A field marked
    OMIT_AT_DEFAULT is left out while at its default, unless `every_key` (the defaults that config_changes
    compares an absent key with). An object with its own stored form gives it (`obj.stored_dict(every_key)`:
    the run config, config/components.py)."""
    if hasattr(obj, "stored_dict"):
        return obj.stored_dict(every_key)
    if dataclasses.is_dataclass(obj):
        return fields_dict(obj, every_key)
    if isinstance(obj, Mapping):
        return {k: to_dict(v, every_key) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return [to_dict(v, every_key) for v in obj]
    return obj


def fields_dict(obj: Any, every_key: bool = False, skip: typing.Container[str] = ()) -> dict[str, Any]:
    """{yaml name: plain value} of dataclass `obj`'s fields but `skip`, by to_dict's rule."""
    return {yaml_name(f): to_dict(getattr(obj, f.name), every_key) for f in fields(obj) if f.name not in skip and
            (every_key or not (f.metadata.get(OMIT_AT_DEFAULT) and getattr(obj, f.name) == f.default))}


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """Return a copy of nested `data` with `a.b.c` set to value."""
    head, _, rest = dotted.partition(".")
    out = dict(data)
    if rest:
        inner = out.get(head) or {}
        if not isinstance(inner, Mapping):
            raise ConfigError(f"{dotted}: {head} is not a section")
        out[head] = set_dotted(dict(inner), rest, value)
    else:
        out[head] = value
    return out


def flatten(cfg: Any) -> dict[str, Any]:
    """Dotted key -> scalar value (for MLflow params and tables)."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            out[prefix] = value

    walk("", to_dict(cfg))
    return out
