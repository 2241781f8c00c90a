"""The study's composition root (harness/builtins.py is the product's): the modules that register the
study's entries, by registry. studies/__init__.py names it with `harness.registry.compose`, after the
product's root, so the study's entries come after the built-ins (its report section after the lab's)."""
from __future__ import annotations

import importlib

from harness.registry import SECTIONS, Registry

BUILTINS: dict[Registry, tuple[str, ...]] = {
    SECTIONS: ("studies.lab_verdicts",),                              # the lab's verdict per claim
}


def load(registry: Registry) -> None:
    """Import the modules that register `registry`'s entries of the study."""
    for module in BUILTINS.get(registry, ()):
        importlib.import_module(module)
