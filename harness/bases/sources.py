"""The kinds of starting model (`model.kind`, registry MODELS): what the run config, the trial and the dry run
ask of each, so that none of them names a kind. Stdlib only (config validation reads it without torch).

- `tiny`: a frozen base shipped in harness/bases/<model.base>/, checked against its manifest, with the fixed
  eval set it was measured on, and the dry run's measured CPU figures (suite/plan.py);
- `path`: any local transformers model directory (`model.path`), identified by the sha256 of its weight
  files, projected on GPUs by arithmetic (suite/plan.py gpu_projection, suite/memory.py).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from harness import bases                 # bases.BASES_DIR read at each use (a test may point it elsewhere)
from harness.bases import MANIFEST, BaseModelError, base_names, sha256_file, verify_base
from harness.errors import ConfigError
from harness.registry import MODELS


def _no_eval_set(base_dir: Path, eval_set_sha256: str, size: int) -> None:
    """A model that carries no fixed eval set: nothing to check."""


@dataclass(frozen=True)
class ModelSource:
    """A kind of starting model (registry MODELS)."""
    validate: Callable[[Any, str], None]            # (the model section, its key): its own required settings
    identity: Callable[[Any], tuple[Path, dict]]    # (the model section) -> (local dir, {"name", "sha256"}), verified
    check_eval_set: Callable[[Path, str, int], None] = _no_eval_set   # (dir, the eval set's sha256, its size)
    measured: bool = False                 # the dry run's measured CPU figures (suite/plan.py TINY_STEP_S) cost it
    gpu_projection: bool = False           # a suite of it on GPUs gets the arithmetic GPU and memory projections


def _tiny_validate(model: Any, key: str) -> None:
    if model.path is not None:          # ignored, it would train the tiny base while the user meant their model
        raise ConfigError(f"{key}.path: read by {key}.kind path only (here kind is 'tiny', the frozen base "
                          f"{model.base!r}); set {key}.kind: path to train the model there, or remove {key}.path")
    if model.base not in base_names():
        raise ConfigError(f"{key}.base: {model.base!r} is not valid; choose one of {', '.join(base_names())}")


def _tiny_identity(model: Any) -> tuple[Path, dict]:
    path = bases.BASES_DIR / model.base
    if not (path / MANIFEST).is_file():
        raise BaseModelError(f"model.base: no frozen base {model.base!r}; shipped: {', '.join(base_names()) or 'none'}")
    manifest = verify_base(path)
    return path, {"name": manifest["name"], "sha256": manifest["sha256"]}


def _tiny_eval_set(base_dir: Path, eval_set_sha256: str, size: int) -> None:
    from harness.bases.models import check_eval_set          # torch: only when a trial starts
    check_eval_set(base_dir, eval_set_sha256, size)


def _path_validate(model: Any, key: str) -> None:
    if not model.path:
        raise ConfigError(f"{key}.path: required when {key}.kind is 'path' (a local model directory)")


def _path_identity(model: Any) -> tuple[Path, dict]:
    path = Path(model.path)
    if not (path / "config.json").is_file():
        raise BaseModelError(f"model.path {path}: no transformers model directory there (config.json missing); "
                             f"set model.path to a local model directory")
    digest = hashlib.sha256()
    for file in sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin")):
        digest.update(f"{file.name}:{sha256_file(file)}\n".encode())
    return path, {"name": str(path.resolve()), "sha256": digest.hexdigest()}


MODELS.register("tiny")(ModelSource(_tiny_validate, _tiny_identity, _tiny_eval_set, measured=True))
MODELS.register("path")(ModelSource(_path_validate, _path_identity, gpu_projection=True))
