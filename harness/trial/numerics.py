"""The float path a trial's numbers come from: pinned before torch is imported, and recorded.

Sampling turns a 1e-8 difference in a log-prob into another run, so which machine code computes the
floats decides a trial's numbers as much as its seed does. On x86-64 CPUs two libraries choose their code
by the processor they find, and the choice differs between vendors and generations:

- MKL (torch's BLAS: every matmul of a trial is an MKL SGEMM, `MKL_VERBOSE=1` shows) dispatches on the
  ISA by default; its conditional numerical reproducibility mode `MKL_CBWR=COMPATIBLE` (SSE2 without
  rcpps/rsqrtps) is the one branch Intel documents as equal on Intel and non-Intel processors. The ISA
  branches are Intel-only: on an AMD EPYC `MKL_CBWR=AVX2` reads back from MKL as AUTO.
- ATen's own vectorized kernels (softmax, norms, AdamW, sampling) dispatch on `ATEN_CPU_CAPABILITY`:
  AVX-512 on an AVX-512 Xeon, AVX2 on an AVX2 EPYC; `avx2` forces the same kernels on both.
- oneDNN (`ONEDNN_MAX_CPU_ISA`) runs no primitive in a trial today (`ONEDNN_VERBOSE=1` prints none); it is
  capped at AVX2 too, at no cost, so that a torch that routes a matmul to it keeps the path.
- Engine version 3 (`model.forward: lean3`) computes its matmuls in numpy's bundled OpenBLAS instead of MKL
  (harness/rollout/gemm3.py: about twice the rate of MKL's COMPATIBLE SGEMM, benchmarks/README.md);
  `OPENBLAS_CORETYPE=Haswell` fixes its kernels and blocking on every CPU with AVX2 and FMA. No v1/v2 trial
  calls OpenBLAS, so their path is unchanged; a v3 trial's float path names OpenBLAS's kernels and version
  besides ATen's and MKL's (attention and the rest still run on them).

Pinned, AMD EPYCs of different generations agree bit for bit; on v1's and v2's path an Intel Xeon parts from
them at a trial's first update (in AdamW's parameter update, whose float32 square root is MKL's vendor-dependent
approximation: docs/reproducibility.md). Engine 3's fused AdamW takes that root outside MKL, and its trials
reran bit for bit on one Intel Xeon; one model is not every one, so the CPU vendor stays part of what must
agree (IDENTITY) before a difference is called a failure.

The rule is process-wide and the same for every trial: `pin()` sets PINNED in os.environ unless the user
chose otherwise (`STALEBENCH_FLOAT_PATH=native` lets MKL and ATen choose; a conflicting variable already in
the environment is kept, with a one-line warning). It must run before torch is imported (MKL and ATen read
the variables once); the CLI's main, the tests' conftest and the Ray session (its workers inherit or are
given the same variables) call it. `record()` reads back what torch and MKL actually use, for each trial's
provenance, and warns once per process when that is not the path the rule asked for.

Measurements behind the choice (AMD EPYC, torch 2.13.0+cpu, MKL 2024.2, one thread): docs/reproducibility.md.
Sources: MKL's CBWR branches, https://www.intel.com/content/www/us/en/docs/onemkl/developer-guide-linux/
2024-2/specifying-code-branches.html; the constants, mkl_types.h (MKL_CBWR_*); ATen's dispatch,
pytorch/pytorch aten/src/ATen/native/DispatchStub.cpp (compute_cpu_capability: an env value is taken
without checking the CPU, so `avx2` is set only where /proc/cpuinfo lists avx2 and fma).
"""
from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, MutableMapping

from harness.errors import ConfigError

RULE_ENV = "STALEBENCH_FLOAT_PATH"
RULES = ("pinned", "native")
PINNED = {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
          "OPENBLAS_CORETYPE": "Haswell"}          # engine 3's matmuls (harness/rollout/gemm3.py); v1/v2 never call OpenBLAS
PINNED_PATH = "aten=avx2 mkl=compatible"          # what record() reads back under PINNED
PINNED_GEMM3 = "openblas=haswell"                 # and, for lean3 (its Forward.gemm), what its matmuls read back (+ version)
# The record's fields that must agree for two runs of a trial to agree bit for bit (with its config). The
# CPU vendor is one: an Intel Xeon and AMD EPYCs on PINNED_PATH part at the first update
# (docs/reproducibility.md).
IDENTITY = ("float_path", "cpu_vendor", "torch", "mkl", "threads")
REQUIRED_FLAGS = ("avx2", "fma")                   # ATen's AVX2 kernels need both (DispatchStub.cpp)

# mkl_types.h: mkl_cbwr_get(MKL_CBWR_ALL) returns a branch, plus MKL_CBWR_STRICT when strict mode is on.
_CBWR_BRANCHES = {1: "off", 2: "auto", 3: "compatible", 4: "sse2", 6: "ssse3", 7: "sse4_1", 8: "sse4_2",
                  9: "avx", 10: "avx2", 11: "avx512_mic", 12: "avx512", 13: "avx512_mic_e1", 14: "avx512_e1"}
_CBWR_STRICT = 0x10000
_warned: set[str] = set()


def rule(environ: MutableMapping[str, str] = os.environ) -> str:
    """The process's rule: "pinned" (the default) or "native" ($STALEBENCH_FLOAT_PATH)."""
    value = environ.get(RULE_ENV, "pinned").strip().lower() or "pinned"
    if value not in RULES:
        raise ConfigError(f"{RULE_ENV}={value[:40]!r}: expected one of {', '.join(RULES)} (pinned is the default)")
    return value


def cpu_info(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, set[str]]:
    """(vendor, ISA flags) of this machine's first CPU, ("unknown", empty) where /proc/cpuinfo is absent."""
    vendor, flags = "unknown", set()
    try:
        text = cpuinfo.read_text()
    except OSError:
        return platform.machine() or vendor, flags
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "vendor_id" and vendor == "unknown":
            vendor = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
    return vendor, flags


def pin(environ: MutableMapping[str, str] = os.environ, cpuinfo: Path = Path("/proc/cpuinfo"),
        modules: Mapping[str, object] = sys.modules) -> str | None:
    """Apply the rule to `environ` (call it before torch is imported); a one-line warning, or None.

    Sets each PINNED variable that is unset. A variable already set to another value is the user's choice and
    is kept (the warning names it); a CPU without AVX2 and FMA, or torch imported already, cannot be pinned.
    """
    if rule(environ) == "native":
        return None
    vendor, flags = cpu_info(cpuinfo)
    missing = [f for f in REQUIRED_FLAGS if f not in flags]
    if missing:
        return (f"the pinned float path needs an x86-64 CPU with {' and '.join(REQUIRED_FLAGS)} ({vendor} lacks "
                f"{', '.join(missing)}): this process computes on its native path, which may not reproduce "
                f"the reference's numbers bit for bit (docs/reproducibility.md)")
    overridden = [f"{k}={environ[k]}" for k, v in PINNED.items() if k in environ and environ[k] != v]
    unset = [k for k in PINNED if k not in environ]
    for k in unset:
        environ[k] = PINNED[k]
    if unset and "torch" in modules:
        return (f"torch was imported before the float path was pinned ({', '.join(unset)} came too late): this "
                f"process's trials may not reproduce bit for bit; import harness.trial.numerics and call pin() first")
    if overridden:
        return (f"{', '.join(overridden)} in the environment overrides the pinned float path "
                f"({' '.join(f'{k}={v}' for k, v in PINNED.items())}): its trials record their own path and the "
                f"report flags a suite that mixes paths (unset it, or set {RULE_ENV}=native to choose the native path)")
    return None


def env_vars(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """The float-path variables of this process, to hand to processes it starts (e.g. Ray's runtime_env)."""
    return {k: environ[k] for k in (RULE_ENV, *PINNED) if k in environ}


def warn_once(message: str | None) -> None:
    """Print a warning line on stderr, once per process for each distinct message."""
    if message and message not in _warned:
        _warned.add(message)
        print(f"stalebench: warning: {message}", file=sys.stderr)


def _mkl(torch) -> tuple[str | None, str | None, str | None]:
    """(version, CNR mode, AUTO's branch) from MKL itself, through the symbols libtorch_cpu exports; None
    for what cannot be read (a torch without MKL, or one that links it otherwise)."""
    import ctypes
    try:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        buf = ctypes.create_string_buffer(256)
        lib.MKL_Get_Version_String(buf, len(buf))
        version = buf.value.decode(errors="replace").split(" for ")[0].replace("Intel(R) ", "")
        lib.mkl_serv_cbwr_get.argtypes = [ctypes.c_int]
        mode = lib.mkl_serv_cbwr_get(-1)                     # -1: MKL_CBWR_ALL
        auto = lib.mkl_serv_cbwr_get_auto_branch()
    except (OSError, AttributeError):
        return None, None, None
    name = _CBWR_BRANCHES.get(mode & ~_CBWR_STRICT, f"code {mode}") + (",strict" if mode & _CBWR_STRICT else "")
    return version, name, _CBWR_BRANCHES.get(auto, f"code {auto}")


def record(device: str = "cpu", read_gemm: Callable[[], str] | None = None) -> dict[str, Any]:
    """The float path this process computes a trial on (`device`: "cpu" or "cuda"), read back from torch and
    MKL (and, for a forward whose matrix products another library computes, from `read_gemm`, its `Forward.gemm`:
    engine 3's OpenBLAS), for the trial's provenance.

    `float_path` and `cpu_vendor` must agree between two runs for their numbers to agree bit for bit (with
    the same packages, config and threads: IDENTITY); `pinned` says whether it is the path the rule asks for.
    Warns once (stderr) when the rule is "pinned" and a CPU trial's path read back is another.
    """
    import torch

    vendor, flags = cpu_info()
    mkl_version, cbwr, auto = _mkl(torch) if torch.backends.mkl.is_available() else (None, None, None)
    capability = torch.backends.cpu.get_cpu_capability().lower()
    path = f"aten={capability} mkl={cbwr or 'none'}"
    if device == "cuda":                   # the GPU computes the numbers: its model and CUDA decide them
        path = f"cuda={torch.cuda.get_device_name()} cuda_version={torch.version.cuda} " + path
        gemm = None
    else:
        gemm = read_gemm() if read_gemm is not None else None
        path = path if gemm is None else f"{path} {gemm}"
    wanted = rule()
    pinned = path == PINNED_PATH if gemm is None else path.startswith(f"{PINNED_PATH} {PINNED_GEMM3} ")
    if wanted == "pinned" and not pinned and device == "cpu":
        warn_once(f"this process computes on float path '{path}', not the pinned '{PINNED_PATH}"
                  f"{'' if gemm is None else ' ' + PINNED_GEMM3}' (set by "
                  f"harness.trial.numerics.pin() before torch is imported): its trials may not reproduce bit for bit")
    return {"float_path": path, "rule": wanted, "pinned": pinned, "device": device,
            "aten_cpu_capability": capability, "mkl_cbwr": cbwr, "mkl_cbwr_auto_branch": auto,
            "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "mkl": mkl_version, "onednn": _onednn_version(torch), "gemm": gemm,
            "cpu_vendor": vendor,
            "cpu_isa": sorted(f for f in flags if f in ISA_FLAGS)}


ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "amx_tile")


def _onednn_version(torch) -> str | None:
    """oneDNN's version as torch's build configuration states it ("v3.12.0"), None where absent."""
    text = torch.__config__.show()
    _, found, rest = text.partition("MKL-DNN ")
    return rest.split()[0] if found and rest else None


def resumed(previous: dict[str, Any] | None, now: dict[str, Any], step: int) -> dict[str, Any]:
    """The record of a trial resumed at `step` by a process computing on `now`, its earlier steps having
    been computed as `previous` says (the provenance written before). A trial's float path is that of all
    its steps: a resume on another path, or on another CPU vendor, makes it "mixed", which no single run
    reproduces bit for bit."""
    previous = previous or {}
    before, after = previous.get("float_path"), now["float_path"]
    if previous.get("cpu_vendor") not in (None, now.get("cpu_vendor")):
        before, after = f"{before} ({previous['cpu_vendor']})", f"{after} ({now.get('cpu_vendor')})"
    if step <= 0 or previous.get("float_path") is None or before == after:
        return now
    warn_once(f"this trial resumes at step {step} on float path '{after}' after '{before}': its "
              f"numbers are from two paths (recorded as mixed)")
    return {**now, "float_path": f"mixed: {before} to step {step}, then {after}", "pinned": False}
