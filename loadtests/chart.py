"""One PNG bar chart per benchmark section, next to docs/benchmarks.md."""

from __future__ import annotations

import re
from pathlib import Path

from loadtests.report import Section


def _number(cell: str) -> float | None:
    match = re.match(r"^\s*([\d,]+(?:\.\d+)?)", cell)
    return float(match[1].replace(",", "")) if match else None


def _column(section: Section) -> int | None:
    """The last column whose cells are all numbers (the figure the section is about)."""
    for index in range(len(section.header) - 1, 0, -1):
        if all(_number(row[index]) is not None for row in section.rows if len(row) > index):
            return index
    return None


def draw(section: Section, folder: Path) -> Path | None:
    """A horizontal bar chart of the section's main numeric column; the PNG's path."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    from matplotlib import pyplot

    column = _column(section)
    if column is None or not section.rows or not section.plotted:
        return None
    labels = [" / ".join(row[:column][:2])[:48] for row in section.rows]
    values = [_number(row[column]) or 0.0 for row in section.rows]
    figure, axes = pyplot.subplots(figsize=(8, 0.35 * len(values) + 1.2))
    axes.barh(range(len(values)), values, color="#4c72b0")
    axes.set_yticks(range(len(values)), labels, fontsize=7)
    axes.invert_yaxis()
    axes.set_xlabel(section.header[column])
    axes.set_title(section.title)
    figure.tight_layout()
    folder.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", section.title.lower()).strip("-")
    path = folder / f"{slug}.png"
    figure.savefig(path, dpi=110)
    pyplot.close(figure)
    return path
