"""JSON files that readers never see half-written (torch-free, so the CLI imports it early)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json_atomically(path: Path, data: dict[str, Any]) -> None:
    """Write through a temporary file and rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(partial, path)
