"""What produced a result: collected when a trial starts and written with it (stdlib only).

The report shows provenance from the trials themselves (and flags a suite that mixes commits, versions
or bases), never from the process that renders it.
"""
from __future__ import annotations

import datetime as dt
import importlib.metadata as md
import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Mapping

PACKAGES = ("stalebench", "torch", "transformers", "ray", "mlflow", "vllm", "deepspeed", "numpy")
SOURCE_ROOT = Path(__file__).resolve().parents[1]      # the checkout stalebench runs from


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(SOURCE_ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state() -> tuple[str, bool | None]:
    """(commit of the stalebench checkout or "unknown", whether tracked files differ from it or None)."""
    commit = _git("rev-parse", "HEAD")
    if not commit:
        return "unknown", None
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return commit, (None if dirty is None else bool(dirty))


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Installed version of each distribution ("not installed" where absent), without importing it."""
    out = {}
    for name in names:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = "not installed"
    return out


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def collect(*, config_sha256: str, base: Mapping[str, Any] | None, eval_set_sha256: str | None,
            torch_threads: int | None, gpu: str | None, numerics: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The provenance record of a trial starting now in this process; `numerics` is the float path it computes
    on (harness.trial.numerics.record())."""
    commit, dirty = git_state()
    return {"stalebench": package_versions(("stalebench",))["stalebench"], "git_commit": commit, "git_dirty": dirty,
            "packages": package_versions(), "python": platform.python_version(), "torch_threads": torch_threads,
            "cpu": cpu_name(), "gpu": gpu, "host": platform.node(), "platform": platform.platform(),
            "base_model": None if base is None else dict(base), "eval_set_sha256": eval_set_sha256,
            "config_sha256": config_sha256, "numerics": None if numerics is None else dict(numerics), "pid": os.getpid(),
            "started_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")}


def mlflow_tags(record: Mapping[str, Any]) -> dict[str, str]:
    """The provenance as flat MLflow tags (stalebench.*)."""
    base = record.get("base_model") or {}
    tags = {"git_commit": record.get("git_commit"), "git_dirty": record.get("git_dirty"),
            "config_sha256": record.get("config_sha256"), "base_model": base.get("name"),
            "base_sha256": base.get("sha256"), "eval_set_sha256": record.get("eval_set_sha256"),
            "torch_threads": record.get("torch_threads"), "cpu": record.get("cpu"), "gpu": record.get("gpu"),
            "float_path": (record.get("numerics") or {}).get("float_path"),
            **{f"version.{k}": v for k, v in (record.get("packages") or {}).items()}}
    return {f"stalebench.{k}": str(v) for k, v in tags.items() if v is not None}
