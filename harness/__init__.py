"""stalebench's harness. Importing the package names its composition root, harness/builtins.py (the built-in
components by registry); the first use of a registry loads that registry's built-ins (harness/registry.py)."""
from harness.registry import compose

compose("harness.builtins")
