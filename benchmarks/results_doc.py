"""Write a benchmark's result table into its marked block of docs/benchmarks.md (shared by the benchmarks)."""

from __future__ import annotations

import argparse
from pathlib import Path

BENCHMARKS_DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def write_block(name: str, title: str, table: str, path: Path = BENCHMARKS_DOC) -> None:
    """Replace the text between ``<!-- name:start -->`` and ``<!-- name:end -->`` with ``table``.

    A document without the block gets a new section ``## title`` holding it at the end.
    """
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    marker_start, marker_end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{marker_start}\n{table}\n{marker_end}"
    if marker_start in text:
        before, rest = text.split(marker_start, 1)
        text = before + block + rest.split(marker_end, 1)[1]
    else:
        text += f"\n## {title}\n\n{block}\n"
    path.write_text(text)


def publish(name: str, title: str, table: str, *, write_docs: bool) -> None:
    """Print a benchmark's result table and, when ``write_docs``, put it into its block (:func:`write_block`)."""
    print(table)
    if write_docs:
        write_block(name, title, table)


def write_docs_argument(parser: argparse.ArgumentParser) -> None:
    """Add the ``--write-docs`` flag whose value :func:`publish` takes."""
    parser.add_argument("--write-docs", action="store_true", help="put the results into docs/benchmarks.md")
