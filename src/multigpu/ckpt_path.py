"""Where ``ckpt_path`` points, checked before anything heavy is imported: ``latest`` becomes the
newest run's checkpoint; a folder or a missing file is refused with what to pass instead."""

from __future__ import annotations

from pathlib import Path

from multigpu.errors import UserError

LATEST = "latest"
LAST = "last.ckpt"  # after every finished epoch (callbacks.LastCheckpoint)
PREVIOUS = "previous.ckpt"  # the one before it, kept for when last.ckpt is damaged


def latest_checkpoint(runs_dir: str | Path) -> Path:
    """The most recently written ``checkpoints/last.ckpt`` under ``runs_dir`` (sweeps included,
    and the run's own folder: a restarted run finds its own)."""
    runs_dir = Path(runs_dir)
    found = [p for p in runs_dir.glob(f"**/checkpoints/{LAST}") if p.is_file()]
    if not found:
        raise UserError(
            f"ckpt_path=latest found no checkpoints/{LAST} under {runs_dir}/: "
            f"train a run first, or pass ckpt_path=<run>/checkpoints/{LAST}"
        )
    return max(found, key=lambda p: p.stat().st_mtime)


def checkpoint_file(ckpt_path: str | Path) -> Path:
    """``ckpt_path`` as an existing file."""
    path = Path(ckpt_path).expanduser()
    if path.is_dir():
        inside = next(
            (p for p in (path / "checkpoints" / LAST, path / LAST) if p.is_file()),
            path / "checkpoints" / LAST,
        )
        raise UserError(
            f"ckpt_path={path} is a folder: pass the checkpoint file in it, e.g. ckpt_path={inside}"
        )
    if not path.is_file():
        raise UserError(
            f"ckpt_path={path} does not exist: pass a .ckpt file, "
            f"e.g. outputs/<date>/<time>/checkpoints/{LAST}"
        )
    return path


def resolve_ckpt_path(ckpt_path: str | None, runs_dir: str | Path) -> Path | None:
    """The checkpoint file a run resumes from, if any."""
    if ckpt_path is None:
        return None
    if str(ckpt_path) == LATEST:
        return latest_checkpoint(runs_dir)
    return checkpoint_file(ckpt_path)
