"""Child process that runs ``math_verify`` for :mod:`harness.tasks.verify`.

Run as a script (``python _math_verify_worker.py``), never imported. Protocol, one JSON object per
line: the worker first writes ``{"ready": true}`` (or ``{"error": "..."}`` if ``math_verify`` cannot
be imported), then for each request line ``{"id": int, "pred": str, "gold": str, "timeout_s": float}``
it writes ``{"id": int, "ok": bool}`` with the request's id.

Lifetime: it exits when its stdin closes (EOF), which happens when the parent exits or dies (a child
the parent forks drops its copy of the pipe: ``verify.py`` forgets the worker after a fork).

Safety: both strings are parsed only by math_verify's LaTeX parser (ANTLR, no ``eval``); the
``ExprExtractionConfig`` path, which goes through ``sympy.parse_expr`` (an ``eval``), is never used.
Time is bounded twice: an interval timer interrupts slow pure-Python work at ``timeout_s`` so the
worker can answer ``False`` and stay alive, and the parent kills the worker outright when C-level work
(e.g. ``9**9**9``) ignores the timer. If the parent cannot (it died), a CPU-time timer with the
default action of SIGVTALRM (terminate, delivered by the kernel, no Python code needed) ends the
worker after ``timeout_s + WORKER_CPU_GRACE_S`` CPU seconds on one request. An address-space limit
turns huge allocations into ``MemoryError`` instead of swapping the host.
"""

import sys

# Running as a script puts this package directory first on sys.path, where sibling modules
# (base.py, verify.py, ...) could shadow unrelated top-level imports; drop it.
del sys.path[0]

import functools  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402

MEMORY_LIMIT_BYTES = 2 * 1024**3
WORKER_CPU_GRACE_S = 1.0  # the parent's wall-clock kill (timeout_s + KILL_GRACE_S) normally comes first


class _Interrupted(BaseException):
    """Raised by the interval timer; a BaseException so library ``except Exception`` blocks pass it on."""


def _on_alarm(signum: int, frame: object) -> None:
    raise _Interrupted


def _reply(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    """Serve verification requests from stdin until it closes."""
    try:
        from math_verify import LatexExtractionConfig, parse, verify
    except Exception as exc:  # report instead of dying silently: the parent raises with this text
        _reply({"error": f"cannot import math_verify: {exc!r}"})
        return
    # math_verify's own timeouts use SIGALRM per call; they are disabled (None) in favour of ours.
    config = [LatexExtractionConfig()]

    def parse_boxed(text: str) -> list:
        return parse("\\boxed{" + text + "}", extraction_config=config, parsing_timeout=None)

    parse_gold = functools.lru_cache(maxsize=1024)(parse_boxed)  # G completions share one gold

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGVTALRM, signal.SIG_DFL)  # terminate: the hard CPU bound per request
    _reply({"ready": True})
    for line in sys.stdin:
        ok, request_id = False, None
        try:
            request = json.loads(line)
            request_id = request.get("id")
            timeout_s = float(request["timeout_s"])
            signal.setitimer(signal.ITIMER_VIRTUAL, timeout_s + WORKER_CPU_GRACE_S)
            signal.setitimer(signal.ITIMER_REAL, timeout_s)
            try:
                gold = parse_gold(request["gold"])
                pred = parse_boxed(request["pred"])
                ok = bool(verify(gold, pred, timeout_seconds=None))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        except (Exception, _Interrupted):  # RecursionError, MemoryError, parse errors: not equal
            ok = False
        _reply({"id": request_id, "ok": ok})
    # stdin closed (EOF): the parent is gone or done; returning ends the process


if __name__ == "__main__":
    main()
