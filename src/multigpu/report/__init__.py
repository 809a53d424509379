"""The sweep report: a table (CSV, Markdown, terminal) and two plots from the jobs' metrics.json."""

from multigpu.report.summary import load_jobs, summarize_jobs, write_report

__all__ = ["load_jobs", "summarize_jobs", "write_report"]
