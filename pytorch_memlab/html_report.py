"""The public path of the HTML report; it is rendered in ``reports/html_page.py``.

    from pytorch_memlab.html_report import write_report
    write_report(profiler, "report.html")      # or a SavedProfile, or a saved file's path
"""
from .reports.html_page import (render_ranks_report, render_report, write_ranks_report,
                                  write_report)

__all__ = ["render_ranks_report", "render_report", "write_ranks_report", "write_report"]
