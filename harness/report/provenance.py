"""Provenance of a report: git commit, suite.yaml hash, package versions, machine, date.

Package versions come from installed distribution metadata (importlib.metadata), so nothing heavy
(torch, ray, ...) is imported.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata as md
import platform
import subprocess

PACKAGES = ("stalebench", "torch", "transformers", "ray", "mlflow")


def git_commit() -> str:
    """``git rev-parse HEAD`` in the current directory, or "unknown" (no git, not a repo, no commit)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                             check=True)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Installed version of each distribution, "not installed" where absent."""
    versions = {}
    for name in names:
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def provenance(suite_sha256: str) -> dict[str, object]:
    """All provenance fields of a report (JSON-serialisable)."""
    return {
        "git_commit": git_commit(),
        "suite_sha256": suite_sha256,
        "packages": package_versions(),
        "python": platform.python_version(),
        "machine": platform.platform(),
        "processor": platform.machine(),
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
    }
