"""Engine version 3's matrix products: OpenBLAS's Haswell SGEMM on torch's memory, one fixed float path.

Engine 3 (`model.forward: lean3`) computes every matmul of its forward and backward here instead of in
torch's MKL. The library is the OpenBLAS that numpy ships (numpy.libs/libscipy_openblas64_*.so), loaded once
with `OPENBLAS_CORETYPE=Haswell` (set by harness.trial.numerics.pin() before numpy or torch is imported): its
AVX2+FMA kernels and its compile-time blocking on every x86-64 CPU with AVX2 and FMA, whatever the CPU's
generation (an AVX-512 part would otherwise get OpenBLAS's SkylakeX kernels); the blocking of the reduction
(SGEMM_DEFAULT_Q) is a compile-time constant of the core type, not read from the CPU's caches. OpenBLAS runs
on one thread here: its threaded driver gives other bits, even on a 128×128·128×384 product (measured).
Why this library and not MKL's CNR branches or oneDNN: benchmarks/README.md, "Float path of engine 3".

    mm(a, b)          # a (m, k) · b (k, n), float32; each contiguous or the transpose of a contiguous tensor
    linear(x, w)      # x (…, k) · wᵀ, w (n, k); with autograd, both backward products through mm as well

The float path's name for provenance is `path()`, e.g. "openblas=haswell 0.3.31.188.0".
"""
from __future__ import annotations

import ctypes
import os
from functools import lru_cache
from pathlib import Path

import torch

CORETYPE = "Haswell"
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


class Gemm3Error(RuntimeError):
    """OpenBLAS cannot be loaded on the Haswell kernels."""


@lru_cache(maxsize=1)
def _lib() -> tuple[ctypes.CDLL, str, str]:
    """(library, symbol prefix, symbol suffix) of numpy's bundled OpenBLAS, checked to run the Haswell kernels."""
    lib, prefix, suffix, name = _load()
    if name != CORETYPE.lower():
        raise Gemm3Error(f"OpenBLAS runs its {name!r} kernels, not {CORETYPE!r}: OPENBLAS_CORETYPE={CORETYPE} must be "
                         f"set before numpy or torch is imported (harness.trial.numerics.pin(); now "
                         f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')!r})")
    return lib, prefix, suffix


@lru_cache(maxsize=1)
def _load() -> tuple[ctypes.CDLL, str, str, str]:
    """(library, symbol prefix, symbol suffix, kernels' core name) of numpy's bundled OpenBLAS."""
    import numpy
    found = sorted((Path(numpy.__file__).parent.parent / "numpy.libs").glob("libscipy_openblas*.so*"))
    if not found:
        raise Gemm3Error("engine 3 needs numpy's bundled OpenBLAS (numpy.libs/libscipy_openblas*.so): not found")
    lib = ctypes.CDLL(str(found[0]))
    for prefix, suffix in (("scipy_", "64_"), ("scipy_", ""), ("", "64_"), ("", "")):
        if hasattr(lib, f"{prefix}cblas_sgemm{suffix}"):
            break
    else:
        raise Gemm3Error(f"{found[0].name} exports no cblas_sgemm")
    core = getattr(lib, f"{prefix}openblas_get_corename{suffix}")
    core.restype = ctypes.c_char_p
    name = core().decode().lower()
    sgemm = getattr(lib, f"{prefix}cblas_sgemm{suffix}")
    i = ctypes.c_int64 if suffix == "64_" else ctypes.c_int
    sgemm.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, i, i, i, ctypes.c_float, ctypes.c_void_p, i,
                      ctypes.c_void_p, i, ctypes.c_float, ctypes.c_void_p, i]
    sgemm.restype = None
    getattr(lib, f"{prefix}openblas_set_num_threads{suffix}")(1)   # its threaded driver rounds otherwise (below)
    return lib, prefix, suffix, name


def path() -> str:
    """What computes engine 3's products, read back from OpenBLAS: "openblas=<core> <version>"."""
    lib, prefix, suffix = _lib()
    core = getattr(lib, f"{prefix}openblas_get_corename{suffix}")
    config = getattr(lib, f"{prefix}openblas_get_config{suffix}")
    core.restype = config.restype = ctypes.c_char_p
    version = next((w for w in config().decode().split() if w[:1].isdigit()), "?")
    return f"openblas={core().decode().lower()} {version}"


def set_threads(n: int) -> None:
    """OpenBLAS's thread count (one, as loaded; benchmarks/float_paths_v3.py tries two: other bits)."""
    lib, prefix, suffix = _lib()
    getattr(lib, f"{prefix}openblas_set_num_threads{suffix}")(n)


def _operand(x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """(tensor, transpose flag, leading dimension) of a 2-D float32 operand, row-major."""
    if x.stride(1) == 1 and x.stride(0) >= max(1, x.shape[1]):
        return x, _NO_TRANS, x.stride(0)
    if x.stride(0) == 1 and x.stride(1) >= max(1, x.shape[0]):
        return x, _TRANS, x.stride(1)
    x = x.contiguous()
    return x, _NO_TRANS, max(1, x.shape[1])


def mm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """a (m, k) · b (k, n) → (m, n), float32 on the CPU, through OpenBLAS (no autograd)."""
    (m, k), n = a.shape, b.shape[1]
    if a.dtype != torch.float32 or b.dtype != torch.float32 or a.device.type != "cpu" or b.shape[0] != k:
        raise ValueError(f"gemm3.mm: float32 CPU operands of matching inner size; got {a.dtype} {tuple(a.shape)}, "
                         f"{b.dtype} {tuple(b.shape)}")
    out = torch.empty(m, n) if out is None else out
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()
    (a, ta, lda), (b, tb, ldb) = _operand(a), _operand(b)
    lib, prefix, suffix = _lib()
    getattr(lib, f"{prefix}cblas_sgemm{suffix}")(_ROW_MAJOR, ta, tb, m, n, k, 1.0, a.data_ptr(), lda, b.data_ptr(),
                                                 ldb, 0.0, out.data_ptr(), n)
    return out


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2: torch.Tensor, w: torch.Tensor) -> torch.Tensor:     # x2 (N, k), w (n, k) -> (N, n)
        ctx.save_for_backward(x2, w)
        return mm(x2, w.t())

    @staticmethod
    def backward(ctx, gy: torch.Tensor):                                       # gy (N, n)
        x2, w = ctx.saved_tensors
        gx = mm(gy, w) if ctx.needs_input_grad[0] else None                    # (N, k)
        gw = mm(gy.t(), x2) if ctx.needs_input_grad[1] else None               # (n, k): the sum over the N rows
        return gx, gw


def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x (…, k) · wᵀ with w (n, k) → (…, n), as F.linear without bias, on OpenBLAS in both directions."""
    x2 = x.reshape(-1, x.shape[-1])
    return _Linear.apply(x2, w).view(*x.shape[:-1], w.shape[0])
