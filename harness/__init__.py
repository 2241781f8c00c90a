"""stalebench's harness. Importing the package names its composition root, harness/builtins.py (the module that
imports the built-in components); the first use of a registry imports it (harness/registry.py)."""
from harness.registry import compose

compose("harness.builtins")
