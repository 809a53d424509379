"""The sweep report: a table (CSV, Markdown, terminal) and two plots from the jobs' metrics.json.
Reads JSON only: ``python -m multigpu.tools.report`` imports no torch."""

from multigpu.tools.report.summary import incomplete, load_jobs, summarize_jobs, to_text
from multigpu.tools.report.write import write_report

__all__ = ["incomplete", "load_jobs", "summarize_jobs", "to_text", "write_report"]
