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
   interrupt); a killed child is replaced in the background. A child found dead (crashed,
   OOM-killed) is replaced and the request retried once. Requests carry ids, and a call that ends
   without its reply (timeout, KeyboardInterrupt) kills the child, so a reply never reaches the wrong
   call. The child exits on its own when its stdin closes (its parent died) and, if stuck in C code
   with nobody left to kill it, after ``timeout_s + WORKER_CPU_GRACE_S`` CPU seconds on one request
   (see ``_math_verify_worker.py``).

Nothing here executes completion text: no ``eval``/``exec``/``sympify`` of raw strings, and the child
uses math_verify's ANTLR LaTeX parser, never its ``sympy.parse_expr`` path. The child is a plain
subprocess (not ``multiprocessing``), so it needs no ``__main__`` guard in the caller, works from
non-main threads, daemonic processes and Ray workers, and math_verify's SIGALRM timeouts (main thread
only) are disabled in favour of the bounds above. Calls in one process share one child and are
serialized, so concurrent callers queue behind each other.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
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
MAX_TIMEOUT_S = 600.0  # also keeps poll()/setitimer() arguments in range

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


class _WorkerDied(Exception):
    """The worker's pipe is closed or broken (it crashed, was OOM-killed, or answered garbage)."""


class _WorkerClient:
    """Owns the math_verify child process of this process; all methods are thread-safe.

    Each request carries an id that the worker echoes; a reply with another id (left over from an
    abandoned request) is dropped. A call that ends without consuming its reply (interrupted, timed
    out) kills the worker, so the pipe never holds a reply meant for an earlier call.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._buffer = b""
        self._last_id = 0

    def reset_after_fork(self) -> None:
        """In a forked child: forget the parent's worker (never kill it) and any held lock."""
        self._lock = threading.Lock()
        self._proc, self._ready, self._buffer = None, False, b""

    def start(self) -> None:
        """Start the worker if needed and wait until it has imported math_verify."""
        with self._lock:
            self._ensure_ready()

    def verify(self, pred: str, gold: str, timeout_s: float) -> bool:
        """math_verify's verdict on ``pred`` against ``gold``; False on timeout or worker death.

        A worker found dead (broken pipe, EOF before the reply) is replaced and the request retried
        once; a second death grades False. A timeout grades False without a retry (the input itself
        is slow). Any exception while waiting (e.g. KeyboardInterrupt) kills the worker, then
        propagates.
        """
        _check_timeout(timeout_s)
        with self._lock:
            for attempt in range(2):
                self._ensure_ready()
                try:
                    reply = self._request(pred, gold, timeout_s)
                except _WorkerDied:
                    self._kill()
                    if attempt == 0:
                        continue  # retry once on a fresh worker
                    self._spawn()
                    return False
                except BaseException:  # the reply would stay in the pipe: never reuse this worker
                    self._kill()
                    raise
                if reply is None:  # timed out: the worker is stuck on this input
                    self._kill()
                    self._spawn()  # warm a replacement while the caller carries on
                    return False
                return reply.get("ok") is True
            raise AssertionError("unreachable")

    def close(self) -> None:
        """Kill the worker (registered with atexit)."""
        with self._lock:
            self._kill()

    def _request(self, pred: str, gold: str, timeout_s: float) -> dict | None:
        """Send one request and return its reply, or None on timeout; raises _WorkerDied."""
        assert self._proc is not None and self._proc.stdin is not None
        self._last_id += 1
        request = {"id": self._last_id, "pred": pred, "gold": gold, "timeout_s": timeout_s}
        try:
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
        except (OSError, ValueError) as exc:  # BrokenPipeError; ValueError: pipe already closed
            raise _WorkerDied from exc
        deadline = time.monotonic() + timeout_s + KILL_GRACE_S
        while True:
            reply = self._read_message(deadline)
            if reply is None or reply.get("id") == self._last_id:
                return reply
            # else: a stale reply to an abandoned request; drop it and keep reading

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
        try:
            message = self._read_message(time.monotonic() + STARTUP_TIMEOUT_S)
        except _WorkerDied:
            message = None
        if message is None or not message.get("ready"):
            self._kill()
            detail = "no reply" if message is None else message.get("error", message)
            raise RuntimeError(f"math_verify worker failed to start ({detail}); is math-verify installed?")
        self._ready = True

    def _read_message(self, deadline: float) -> dict | None:
        """Next JSON object from the worker, or None at ``deadline`` (time.monotonic()).

        Raises _WorkerDied on EOF, a read error or a line that is not a JSON object.
        """
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        poller = select.poll()  # not select.select: no FD_SETSIZE limit in fd-heavy (Ray) processes
        poller.register(fd, select.POLLIN)
        while b"\n" not in self._buffer:
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                return None
            if not poller.poll(math.ceil(remaining_s * 1000)):
                continue  # re-check the deadline
            try:
                chunk = os.read(fd, 65536)
            except OSError as exc:
                raise _WorkerDied from exc
            if not chunk:
                raise _WorkerDied("EOF")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError as exc:
            raise _WorkerDied("garbled reply") from exc
        if not isinstance(message, dict):
            raise _WorkerDied("garbled reply")
        return message

    def _kill(self) -> None:
        """Kill the worker and forget it; never raises for an already dead worker or closed pipe."""
        proc, self._proc, self._ready, self._buffer = self._proc, None, False, b""
        if proc is None:
            return
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):  # flushing a dead worker's stdin: BrokenPipeError
                    pipe.close()


def _check_timeout(timeout_s: object) -> None:
    """Refuse a ``timeout_s`` that is not a finite number of seconds in (0, MAX_TIMEOUT_S]."""
    ok = isinstance(timeout_s, (int, float)) and not isinstance(timeout_s, bool)
    if not ok or not (0 < timeout_s <= MAX_TIMEOUT_S):  # type: ignore[operator]  # NaN fails too
        raise ValueError(f"timeout_s must be a number of seconds in (0, {MAX_TIMEOUT_S:g}]; got {timeout_s!r:.80}")


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
    (calls queue behind concurrent ones in the same process; a worker found dead is restarted and the
    call retried once, which adds its startup). Raises RuntimeError only if the worker cannot start at
    all (e.g. math-verify not installed), so a broken setup is never silent, and ValueError (one
    line) if ``timeout_s`` is not a finite number of seconds in (0, ``MAX_TIMEOUT_S``].

    Args:
        completion: model output, untrusted.
        gold: reference answer (LaTeX or plain text, trusted), e.g. ``"\\frac{1}{2}"`` or ``"72"``.
        timeout_s: bound on the math_verify stage, in seconds.
    """
    _check_timeout(timeout_s)
    if not isinstance(completion, str) or not isinstance(gold, str):
        return False
    pred = extract_answer(completion)
    if not pred or len(pred) > MAX_ANSWER_CHARS or not _braces_balanced(pred):
        return False
    decided = _fast_compare(pred, gold)
    if decided is not None:
        return decided
    return _CLIENT.verify(pred, gold, timeout_s)
