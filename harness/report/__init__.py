"""Stability and accuracy reports over suite results (reads result files only; never imports torch).

``build_report(results_dir, out_dir=None)`` writes reports/<suite>/index.html with figures, CSV tables
and a versioned results.json; ``build_site(reports_root)`` writes reports/index.html over all suites;
``closing_table(index_html)`` returns the plain-text paper table for ``stalebench report`` to print.
"""

from harness.report.html import build_report, build_site
from harness.report.paper import closing_table

__all__ = ["build_report", "build_site", "closing_table"]
