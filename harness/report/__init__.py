"""Stability and accuracy reports over suite results (reads result files only; never imports torch).

``build_report(results_dir, out_dir=None)`` writes reports/<suite>/index.html with figures, CSV tables
and a versioned results.json; ``build_site(reports_root)`` writes reports/index.html over all suites;
``closing_table(index_html)`` returns the plain-text paper table for ``stalebench report`` to print.
"""

import os
import stat
import tempfile


def _matplotlib_dir() -> str:
    """A folder of this user's under the temporary folder for matplotlib's font cache (kept between runs),
    or a fresh one when that name is taken by a link or another user."""
    path = os.path.join(tempfile.gettempdir(), f"stalebench-mpl-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return tempfile.mkdtemp(prefix="stalebench-mpl-")
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        return tempfile.mkdtemp(prefix="stalebench-mpl-")
    return path


if "MPLCONFIGDIR" not in os.environ:    # matplotlib's font cache in a temporary folder, not the user's ~/.cache
    os.environ["MPLCONFIGDIR"] = _matplotlib_dir()

__all__ = ["build_report", "build_site", "closing_table"]


def __getattr__(name: str):
    """The entry points, imported on first use: a statistic's lookup (a suite's `report.statistic`, checked
    when the suite loads) imports stats.py alone, not the page's pandas, matplotlib and templates."""
    if name in ("build_report", "build_site"):
        from harness.report import html
        return getattr(html, name)
    if name == "closing_table":
        from harness.report.paper import closing_table
        return closing_table
    raise AttributeError(f"module 'harness.report' has no attribute {name!r}")
