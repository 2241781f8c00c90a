"""Stability and accuracy reports over suite results (reads result files only; never imports torch).

``build_report(results_dir, out_dir=None)`` writes reports/<suite>/index.html with figures, CSV tables
and a versioned results.json; ``build_site(reports_root)`` writes reports/index.html over all suites.
"""

from harness.report.html import build_report, build_site

__all__ = ["build_report", "build_site"]
