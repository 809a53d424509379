"""The one table writer every report uses: whatever a cell holds, each row keeps its columns."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from multigpu.tools.markdown import cell, table

VALUES = st.one_of(
    st.none(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20), st.booleans()
)


def columns(line: str) -> list[str]:
    """A row's cells, split where Markdown splits them: at pipes not escaped."""
    return re.split(r"(?<!\\)\|", line)[1:-1]


@given(st.lists(st.lists(VALUES, min_size=3, max_size=3), max_size=5))
def test_every_row_has_the_header_columns_whatever_its_cells_hold(rows):
    lines = table(["a", "b", "c"], rows)
    assert len(lines) == 2 + len(rows)
    assert all(len(columns(line)) == 3 for line in lines)
    assert not any("\n" in line for line in lines)


def test_cells_are_formatted_alike():
    assert cell(None) == "-" and cell(None, empty="") == ""
    assert cell(0.123456) == "0.1235" and cell(0.5, "{:.2f}") == "0.50" and cell(7) == "7"
    assert table(["x"], [["a|b"]])[2] == "| a\\|b |"
