"""Reading user-supplied text and YAML safely, for the spec layer: suite files, overrides files, --set values.

The reader itself is harness/store/untrusted.py (the one owner of "open a file someone handed us", also
used below the spec layer for trial files and archives); its module docstring lists what is refused and
why. Public API here: :func:`read_text_file`, :func:`load_yaml_file`, :func:`load_yaml_text`, :func:`short`.
"""
from __future__ import annotations

from harness.store.untrusted import (MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES, SHORT_CHARS,  # noqa: F401 — the API
                                     load_yaml_file, load_yaml_text, read_text_file, short)
