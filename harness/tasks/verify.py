"""Answer extraction and grading of math completions, safe on untrusted model output.

Public API: :func:`grade_math`, :func:`extract_answer`, :func:`last_boxed_content`,
:func:`start_verifier`.

``grade_math(completion, gold)`` runs three stages:

1. **Extract** the final answer from the completion (:func:`extract_answer`), looking only at its last
   ``MAX_COMPLETION_CHARS`` characters, in this order: the last complete ``\\boxed{...}`` /
   ``\\fbox{...}`` (balanced braces), else the text after the last ``#### `` marker (GSM8K style),
   else the last number (``-12``, ``1,000``, ``3.5``, ``3/4``). Answers longer than
   ``MAX_ANSWER_CHARS`` or with unbalanced braces are graded wrong without parsing.
2. **Fast path** (no sympy): equal after light LaTeX normalization, or both plain numbers
   (integers, decimals, ``a/b``, ``\\frac{a}{b}``) compared exactly as fractions. Two unequal integers
   are wrong; anything else undecided goes to stage 3.
3. **math_verify** (``parse`` + ``verify``, LaTeX parser only) in a persistent child process, bounded by
   ``timeout_s``: the child interrupts itself at ``timeout_s`` and is killed at
   ``timeout_s + KILL_GRACE_S`` if it still has not answered (work stuck in C code ignores the
   interrupt); a killed child is replaced in the background.

Nothing here executes completion text: no ``eval``/``exec``/``sympify`` of raw strings, and the child
uses math_verify's ANTLR LaTeX parser, never its ``sympy.parse_expr`` path. The child is a plain
subprocess (not ``multiprocessing``), so it needs no ``__main__`` guard in the caller, works from
non-main threads, daemonic processes and Ray workers, and math_verify's SIGALRM timeouts (main thread
only) are disabled in favour of the bounds above. Calls in one process share one child and are
serialized, so concurrent callers queue behind each other.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import select
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path

MAX_COMPLETION_CHARS = 4_000
MAX_ANSWER_CHARS = 1_000
KILL_GRACE_S = 0.2
STARTUP_TIMEOUT_S = 60.0

_WORKER_SCRIPT = Path(__file__).with_name("_math_verify_worker.py")
_BOX_OPEN_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASHES_RE = re.compile(r"####[ \t]*([^\n]*)")
# A standalone number: not glued to letters or digits ("c03b" in an identifier is not the answer 3).
_NUMBER_RE = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?(?![\w])")
_NOISE_RE = re.compile(r"\\left(?![a-zA-Z])|\\right(?![a-zA-Z])|\\[,;:! ]|\\?\$|\s+")
_DECIMAL_RE = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[+-]?\.\d+")
_FRACTION_RE = re.compile(r"([+-]?)(?:\\frac\{(\d+)\}\{(\d+)\}|(\d+)/(\d+))")
_MAX_FAST_NUMBER_CHARS = 64  # keeps Fraction() cheap; longer numbers go to math_verify


def last_boxed_content(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}`` or ``\\fbox{...}`` in ``text``, else None.

    One pass with a brace stack, so it is linear even for thousands of unclosed boxes. A backslash
    escapes the next character (``\\{`` and ``\\}`` do not count as braces). "Last" means the box that
    closes last: for ``\\boxed{\\boxed{1}}`` that is the outer one.
    """
    box_braces = {m.end() - 1 for m in _BOX_OPEN_RE.finditer(text)}
    open_braces: list[int] = []
    last: tuple[int, int] | None = None
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == "{":
            open_braces.append(i)
        elif char == "}" and open_braces:
            start = open_braces.pop()
            if start in box_braces:
                last = (start + 1, i)
        i += 1
    return None if last is None else text[last[0] : last[1]]


def extract_answer(completion: str) -> str | None:
    """Final answer of ``completion`` (boxed, then ``#### ``, then last number), or None if none."""
    text = completion[-MAX_COMPLETION_CHARS:]
    boxed = last_boxed_content(text)
    if boxed is not None:
        return boxed.strip()
    hashes = [h.strip() for h in _HASHES_RE.findall(text) if h.strip()]
    if hashes:
        return hashes[-1]
    numbers = _NUMBER_RE.findall(text)
    return numbers[-1] if numbers else None


def _normalize(answer: str) -> str:
    """Drop spacing, ``$``/``\\$``, ``\\left``/``\\right``, a trailing period; ``\\dfrac`` -> ``\\frac``."""
    answer = _NOISE_RE.sub("", answer).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return answer.rstrip(".")


def _as_fraction(answer: str) -> Fraction | None:
    """Exact value of a normalized plain number (``-1,000.5``, ``3/4``, ``\\frac{3}{4}``), else None."""
    if len(answer) > _MAX_FAST_NUMBER_CHARS:
        return None
    if _DECIMAL_RE.fullmatch(answer):
        return Fraction(answer.replace(",", ""))
    match = _FRACTION_RE.fullmatch(answer)
    if match is None:
        return None
    sign, tex_num, tex_den, num, den = match.groups()
    numerator, denominator = int(tex_num or num), int(tex_den or den)
    if denominator == 0:
        return None
    return Fraction(-numerator if sign == "-" else numerator, denominator)


def _fast_compare(pred: str, gold: str) -> bool | None:
    """True/False when decidable without sympy, None when math_verify must decide."""
    pred, gold = _normalize(pred), _normalize(gold)
    if pred == gold:
        return True
    pred_value, gold_value = _as_fraction(pred), _as_fraction(gold)
    if pred_value is None or gold_value is None:
        return None
    if pred_value == gold_value:
        return True
    if pred_value.denominator == 1 and gold_value.denominator == 1:
        return False
    return None  # e.g. 0.333333 vs 1/3: math_verify's rounding rules decide


def _braces_balanced(text: str) -> bool:
    """Whether ``{``/``}`` (ignoring ``\\{``/``\\}``) nest properly; an unbalanced answer could
    close the ``\\boxed{`` the worker wraps it in and smuggle in a second answer."""
    depth = 0
    for char in text.replace("\\{", "").replace("\\}", ""):
        depth += (char == "{") - (char == "}")
        if depth < 0:
            return False
    return depth == 0


class _WorkerClient:
    """Owns the math_verify child process of this process; all methods are thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._buffer = b""

    def reset_after_fork(self) -> None:
        """In a forked child: forget the parent's worker (never kill it) and any held lock."""
        self._lock = threading.Lock()
        self._proc, self._ready, self._buffer = None, False, b""

    def start(self) -> None:
        """Start the worker if needed and wait until it has imported math_verify."""
        with self._lock:
            self._ensure_ready()

    def verify(self, pred: str, gold: str, timeout_s: float) -> bool:
        """math_verify's verdict on ``pred`` against ``gold``; False on timeout or worker death."""
        with self._lock:
            self._ensure_ready()
            assert self._proc is not None and self._proc.stdin is not None
            request = {"pred": pred, "gold": gold, "timeout_s": timeout_s}
            try:
                self._proc.stdin.write((json.dumps(request) + "\n").encode())
                self._proc.stdin.flush()
                reply = self._read_message(timeout_s + KILL_GRACE_S)
            except OSError:  # worker died between calls (broken pipe)
                reply = None
            if reply is None:
                self._kill()
                self._spawn()  # warm a replacement while the caller carries on
                return False
            return reply.get("ok") is True

    def close(self) -> None:
        """Kill the worker (registered with atexit)."""
        with self._lock:
            self._kill()

    def _spawn(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, str(_WORKER_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # math_verify warns on every call with timeouts disabled
        )
        self._ready, self._buffer = False, b""

    def _ensure_ready(self) -> None:
        if self._proc is None:
            self._spawn()
        if self._ready:
            return
        message = self._read_message(STARTUP_TIMEOUT_S)
        if message is None or not message.get("ready"):
            self._kill()
            detail = "no reply" if message is None else message.get("error", message)
            raise RuntimeError(f"math_verify worker failed to start ({detail}); is math-verify installed?")
        self._ready = True

    def _read_message(self, timeout_s: float) -> dict | None:
        """Next JSON line from the worker, or None on timeout or EOF."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        poller = select.poll()  # not select.select: no FD_SETSIZE limit in fd-heavy (Ray) processes
        poller.register(fd, select.POLLIN)
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0 or not poller.poll(remaining_s * 1000):
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            for pipe in (self._proc.stdin, self._proc.stdout):
                if pipe is not None:
                    pipe.close()
        self._proc, self._ready, self._buffer = None, False, b""


_CLIENT = _WorkerClient()
atexit.register(_CLIENT.close)
os.register_at_fork(after_in_child=_CLIENT.reset_after_fork)


def start_verifier() -> None:
    """Start the math_verify worker now, so the first :func:`grade_math` call does not pay its
    startup (importing sympy, ~1-2 s). Optional; raises RuntimeError if it cannot start."""
    _CLIENT.start()


def grade_math(completion: str, gold: str, timeout_s: float = 1.0) -> bool:
    """Whether the final answer in ``completion`` equals ``gold`` (see the module docstring).

    Never raises because of the completion: malformed, huge or adversarial input, a timeout, or a
    crashed worker all grade as False, within about ``timeout_s + KILL_GRACE_S`` once the worker is up
    (calls queue behind concurrent ones in the same process). Raises RuntimeError only if the worker
    cannot start at all (e.g. math-verify not installed), so a broken setup is never silent.

    Args:
        completion: model output, untrusted.
        gold: reference answer (LaTeX or plain text, trusted), e.g. ``"\\frac{1}{2}"`` or ``"72"``.
        timeout_s: bound on the math_verify stage, in seconds.
    """
    if not isinstance(completion, str) or not isinstance(gold, str):
        return False
    pred = extract_answer(completion)
    if not pred or len(pred) > MAX_ANSWER_CHARS or not _braces_balanced(pred):
        return False
    decided = _fast_compare(pred, gold)
    if decided is not None:
        return decided
    return _CLIENT.verify(pred, gold, timeout_s)
