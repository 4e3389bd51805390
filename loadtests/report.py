"""docs/benchmarks.md: one section per benchmark, each a table measured in one run."""

from __future__ import annotations

import argparse
import platform
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final


@dataclass
class Section:
    title: str
    intro: str
    header: list[str]
    rows: list[list[str]]
    figures: dict[str, float] = field(default_factory=dict)
    verdicts: list[str] = field(default_factory=list)
    chart: str | None = None  # path of its PNG, relative to the document
    plotted: bool = True  # False: a table too long or too mixed for one bar chart

    def markdown(self) -> str:
        lines = [f"## {self.title}", "", self.intro, ""]
        if self.chart:
            lines += [f"![{self.title}]({self.chart})", ""]
        lines.append("| " + " | ".join(self.header) + " |")
        lines.append("|" + "---|" * len(self.header))
        lines.extend("| " + " | ".join(row) + " |" for row in self.rows)
        if self.verdicts:
            lines.append("")
            lines.extend(f"- {verdict}" for verdict in self.verdicts)
        return "\n".join(lines) + "\n"


def write(
    path: Path, command: str, sections: list[Section], preamble: str = "", tail: str = ""
) -> str:
    machine = f"{platform.machine()}, {platform.system()}, Python {sys.version.split()[0]}"
    text = "\n".join(
        [
            "# Benchmarks",
            "",
            f"Produced by `{command}` on {datetime.now(UTC):%Y-%m-%d} ({machine}).",
            "Every figure is a ratio to a baseline measured side by side in the same run;",
            "absolute times are shown for orientation only and vary between machines.",
            "",
            preamble,
            *[section.markdown() for section in sections],
            tail,
        ]
    )
    path.write_text(text)
    return text


def region(path: Path, name: str) -> str:
    """The `<!-- name -->` region of a doc, markers included; a fresh empty one if absent."""
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    doc = path.read_text() if path.exists() else ""
    _, found, rest = doc.partition(start)
    inner, closed, _ = rest.partition(end)
    return f"{start}{inner if found and closed else chr(10)}{end}\n"


def replace_region(path: Path, name: str, text: str) -> None:
    """Put `text` between `<!-- name -->` and `<!-- /name -->` in a hand-written doc."""
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    doc = path.read_text()
    before, found, rest = doc.partition(start)
    _, closed, after = rest.partition(end)
    if not found or not closed:
        raise ValueError(f"{path} has no {start} ... {end} region")
    path.write_text(f"{before}{start}\n{text}{end}{after}")


BENCHMARKS: Final = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def usage(doc: str | None, module: str, *, write: bool = False) -> None:
    """`python -m loadtests.<module> --help`: the module's docstring, and no run; an
    argument it does not take refused before any run starts (`write`: it takes `--write`,
    as `shown` reads it)."""
    parser = argparse.ArgumentParser(
        prog=f"python -m loadtests.{module}",
        description=(doc or "").strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if write:
        parser.add_argument("--write", action="store_true", help="put it in docs/benchmarks.md")
    parser.parse_args()


def shown(section: Section, argv: list[str]) -> None:
    """A section's `python -m` run: printed, and put in docs/benchmarks.md with `--write`."""
    print(section.markdown())
    if "--write" in argv:
        replace_section(BENCHMARKS, section)


def replace_section(path: Path, section: Section) -> None:
    """Put `section` in place of the one of its title in a generated doc (up to the next
    `## ` heading or `<!-- ` region); before the first region, or at the end, if absent."""
    doc = path.read_text() if path.exists() else ""
    heading = f"## {section.title}\n"
    text = section.markdown()
    at = doc.find(heading)
    if at >= 0:
        ends = [i for i in (doc.find("\n## ", at + 1), doc.find("\n<!-- ", at + 1)) if i >= 0]
        end = min(ends) + 1 if ends else len(doc)
        path.write_text(doc[:at] + text + ("\n" if end < len(doc) else "") + doc[end:])
        return
    region = doc.find("\n<!-- ")
    if region >= 0:
        path.write_text(doc[: region + 1] + text + "\n" + doc[region + 1 :])
    else:
        path.write_text(doc + ("\n" if doc and not doc.endswith("\n") else "") + text)
