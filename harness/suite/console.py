"""A running suite's console (the Ray runner's, `reproduce --in-process`'s): one prefixed line per event and a
live progress line (stderr)."""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

from harness.suite.status import ProgressLine

Say = Callable[[str], None]

_live_line = threading.Event()          # a \r-rewritten progress line is on the terminal


@dataclass(frozen=True)
class printer:                         # a picklable function: Tune pickles its callbacks
    enabled: bool

    def __call__(self, line: str) -> None:
        if self.enabled:
            if _live_line.is_set():
                print("\r\033[K", end="", file=sys.stderr)
                _live_line.clear()
            print(f"[stalebench] {line}", file=sys.stderr, flush=True)


class ProgressThread:
    """Prints a ProgressLine: rewritten every second on a terminal, else a new line when it changed
    (at most every 15 s); once more at the end."""

    def __init__(self, line: ProgressLine, enabled: bool):
        self.line, self.enabled, self.tty = line, enabled, sys.stderr.isatty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stalebench-progress", daemon=True)

    def __enter__(self):
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join(timeout=5)
            printer(True)(str(self.line))

    def _loop(self) -> None:
        last = ""
        while not self._stop.wait(1.0 if self.tty else 15.0):
            text = str(self.line)
            if self.tty:
                print(f"\r\033[K[stalebench] {text}", end="", file=sys.stderr, flush=True)
                _live_line.set()
            elif text != last:
                print(f"[stalebench] {text}", file=sys.stderr, flush=True)
            last = text
