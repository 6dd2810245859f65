"""The README's headline table is the comparison block's own cells: every row it shows, cell for cell, as
docs/results.md's generated comparison block (regenerated from the ledger) has it, so the README cannot drift from
the ledger when arms are added."""

from __future__ import annotations

import os

from reproduce import comparison_report, doc_blocks

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADLINE = "## The effect, reproduced at CPU scale"


def read(path: str) -> str:
    with open(os.path.join(REPO, path)) as f:
        return f.read()


def table_rows(text: str) -> list[list[str]]:
    """The cells of every markdown table row of ``text`` (separator rows left out)."""
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|") and not set(line) <= set("|-: ")]


def comparison_table(results: str) -> dict[str, dict[str, str]]:
    """The comparison block's main table: row label -> column header -> cell."""
    block = doc_blocks.current_block(results, comparison_report.BEGIN, comparison_report.END)
    assert block is not None, "docs/results.md has no comparison block"
    header, *rows = table_rows(block)
    assert header[0] == "method"
    table = {}
    for row in rows:
        if len(row) != len(header):
            break  # the block's next table
        table[row[0]] = dict(zip(header, row, strict=True))
    return table


def mismatches(readme: str, results: str) -> list[str]:
    """Every README headline cell that is not the comparison block's cell of the same row and column."""
    start = readme.index(HEADLINE)
    header, *body = table_rows(readme[start:readme.index("\n## ", start + 1)])
    assert header[0] == "method" and len(header) >= 5 and len(body) >= 4, "the README's headline table is missing"
    table = comparison_table(results)
    found = []
    for row in body:
        theirs = table.get(row[0], {})
        for column, cell in zip(header[1:], row[1:], strict=True):
            if theirs.get(column) != cell:
                found.append(f"{row[0]} / {column}: README {cell!r}, results.md {theirs.get(column)!r}")
    return found


def test_the_readme_headline_is_the_comparison_blocks_cells():
    assert mismatches(read("README.md"), read("docs/results.md")) == []


def test_a_drifted_cell_or_an_unknown_row_is_caught():
    readme, results = read("README.md"), read("docs/results.md")
    start = readme.index(HEADLINE)
    line = next(x for x in readme[start:].splitlines() if x.startswith("| SimSiam + AugSelf |"))
    cells = line.split("|")
    cells[3] = " 99.9 "
    assert len(mismatches(readme.replace(line, "|".join(cells)), results)) == 1
    assert mismatches(readme.replace(line, line.replace("SimSiam + AugSelf", "SimSiam + nothing")), results)
