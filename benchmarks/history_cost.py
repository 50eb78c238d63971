"""The cost of history: the demo's catch-up run with history off and with change logs and SCD2 tables (issue 33).

Runs ``scripts/demo.py`` twice in a row, in fresh working folders, the same workload and seeds each time, once with
``--history off`` and once with ``--history changelog,scd2``, and reads from each output the catch-up run (one window
holding a backlog written at full speed): its row changes, its DAG run's seconds, its merge task's seconds and its
binlog read and staging seconds; with history on, the bytes of the files the catch-up window wrote into the
history tables. Both
runs must end with every table matching its source. Compare the two within one run (shared, noisy machine).

    .venv/bin/python benchmarks/history_cost.py [--backlog 4000] [--write-docs]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from results_doc import publish, write_docs_argument

REPO = Path(__file__).resolve().parent.parent
_CATCH_UP = re.compile(
    r"catch-up run \(window (\d+)\): a backlog of \d+ transactions, (\d+) row changes in ([\d.]+) s .*"
    r"its merge task ([\d.]+) s"
)
_ADDED = re.compile(r"the catch-up window wrote (\d+) bytes in (\d+) files")


def run_demo(history: str, backlog: int, workdir: Path) -> dict[str, float]:
    """Run the demo with ``--history history``; return the catch-up run's numbers."""
    command = [sys.executable, str(REPO / "scripts" / "demo.py"), "--history", history]
    command += ["--backlog", str(backlog), "--workdir", str(workdir)]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    if "RESULT: every table matches its source" not in output:
        raise SystemExit(f"the demo with history {history} did not match its source:\n{output}")
    found = _CATCH_UP.search(output)
    if found is None:
        raise SystemExit(f"no catch-up line in the demo's output:\n{output}")
    numbers = {"rows": float(found.group(2)), "run": float(found.group(3)), "merge": float(found.group(4))}
    added = _ADDED.search(output)
    numbers["bytes"] = float(added.group(1)) if added else 0.0
    numbers["files"] = float(added.group(2)) if added else 0.0
    print(output.split("verification")[0].splitlines()[-1], flush=True)
    return numbers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=4_000, help="transactions of the catch-up window")
    write_docs_argument(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="history-cost-") as scratch:
        off = run_demo("off", args.backlog, Path(scratch) / "off")
        on = run_demo("changelog,scd2", args.backlog, Path(scratch) / "on")
    table = "\n".join(
        [
            "| history | row changes | catch-up DAG run (s) | its merge task (s) | history bytes written (files) |",
            "| --- | ---: | ---: | ---: | ---: |",
            f"| off | {off['rows']:.0f} | {off['run']:.1f} | {off['merge']:.1f} | - |",
            f"| changelog + scd2 | {on['rows']:.0f} | {on['run']:.1f} | {on['merge']:.1f} | "
            f"{on['bytes']:.0f} ({on['files']:.0f}) |",
            "",
            f"Merge task with both history tables / without: **{on['merge'] / off['merge']:.2f}x**; DAG run "
            f"{on['run'] / off['run']:.2f}x; {on['bytes'] / max(off['rows'], 1):.0f} history bytes per row change "
            "(of the run without history; the runs' workloads end in different states, so their backlogs differ).",
        ]
    )
    publish("history_cost", "History: cost on the demo's catch-up run (`benchmarks/history_cost.py`)", table,
            write_docs=args.write_docs)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
