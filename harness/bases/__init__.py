"""The frozen base checkpoints: harness/bases/<name>/ with a manifest `base.json`.

Stdlib only (config validation and reports read manifests without importing torch). A manifest holds
the base's name, `sha256` (its weights file, the identity recorded with every result), the sha256 of
every file, the recipe, and the accuracy measured on the fixed eval set with that set's hash.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

BASES_DIR = Path(__file__).parent
MANIFEST = "base.json"


class BaseModelError(ValueError):
    """A base checkpoint is missing or does not match its recorded sha256 (one line, names the fix)."""


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def base_names() -> list[str]:
    """The frozen base checkpoints shipped with stalebench (harness/bases/<name>/)."""
    return sorted(p.name for p in BASES_DIR.iterdir() if (p / MANIFEST).is_file()) if BASES_DIR.is_dir() else []


def read_manifest(path: Path) -> dict:
    try:
        return json.loads((Path(path) / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise BaseModelError(f"{Path(path) / MANIFEST}: unreadable base manifest ({type(exc).__name__}); "
                             f"restore it (git checkout) or rebuild with `stalebench build-base`") from None


def verify_base(path: Path) -> dict:
    """The manifest of the base checkpoint at `path` after checking every file's sha256."""
    manifest = read_manifest(path)
    for name, expected in manifest["files"].items():
        file = Path(path) / name
        got = sha256_file(file) if file.is_file() else "missing"
        if got != expected:
            raise BaseModelError(f"{file}: sha256 {got[:16]} does not match the expected {expected} of base "
                                 f"{manifest['name']!r}; restore the file (git checkout) — a rebuilt base is a new "
                                 f"version (`stalebench build-base --name ...`)")
    return manifest


def base_identity(model: Any) -> tuple[Path, dict]:
    """(local directory, {"name", "sha256"}) of the run's starting checkpoint (`model`: a
    harness.config.run.ModelConfig), verified by its kind (bases/sources.py: a frozen base against its
    manifest, a local model by the sha256 of its weight files)."""
    from harness.registry import MODELS
    return MODELS.get(model.kind, "model.kind").identity(model)
