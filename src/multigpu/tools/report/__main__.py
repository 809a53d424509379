"""``python -m multigpu.tools.report <sweep dir>``: (re)write a sweep's summary and plots."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from multigpu.config.errors import WriteFailed
from multigpu.storage.ownership import holder, is_free
from multigpu.storage.record_file import records_below
from multigpu.tools.arguments import OneLineParser, path_name
from multigpu.tools.report import incomplete, to_text, write_report
from multigpu.tools.report.write import others_file


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m multigpu.tools.report", description=__doc__)
    parser.add_argument("sweep_dir", type=path_name, help="e.g. outputs/<date>/<time>")
    args = parser.parse_args(argv)
    args.sweep_dir = Path(args.sweep_dir)  # after the check: Path("") is the current folder
    if not args.sweep_dir.is_dir():
        print(f"error: {args.sweep_dir} is not a folder: pass a sweep folder", file=sys.stderr)
        return 2
    if os.path.lexists(args.sweep_dir / "metrics.json"):  # its report would go among its files
        print(
            f"error: {args.sweep_dir} is a run's folder (it holds its metrics.json), not a "
            f"sweep's: pass the folder of the sweep or runs it belongs to, e.g. "
            f"{args.sweep_dir.resolve().parent}",
            file=sys.stderr,
        )
        return 2
    if not is_free(args.sweep_dir):  # the sweep or run writes its own report when it ends
        print(
            f"error: {args.sweep_dir} is in use by a run ({holder(args.sweep_dir)}): report it "
            "once that run has ended (a sweep writes its report itself)",
            file=sys.stderr,
        )
        return 2
    if not records_below(args.sweep_dir):
        print(
            f"error: no metrics.json below {args.sweep_dir}: pass a folder holding finished jobs",
            file=sys.stderr,
        )
        return 2
    if (kept := others_file(args.sweep_dir)) is not None:
        print(
            f"error: {kept} is not a report's (it does not begin with the report's table), and "
            "the report would replace it: move it out of the folder, then report again",
            file=sys.stderr,
        )
        return 2
    try:
        rows = write_report(args.sweep_dir)
    except (WriteFailed, OSError) as err:  # a read-only or full disk, where the jobs are
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        print(
            f"error: cannot write the report in {args.sweep_dir} ({reason}): copy the sweep "
            "folder somewhere writable",
            file=sys.stderr,
        )
        return 1
    print(to_text(rows), end="")
    written = "summary.csv, summary.md, test_acc.png, acc_vs_time.png, scaling.png"
    if (args.sweep_dir / "phases.png").is_file():
        written += ", phases.png"
    print(f"wrote {written} in {args.sweep_dir}")
    return 1 if incomplete(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
