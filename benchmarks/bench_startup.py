"""Start-up time of the ``embinit`` command: help, an argument error, a report's help and an inspection of a bare shape,
each beside ``python -c "import torch"`` in the same run (issue 30: ``embinit --help`` took 6 s, Lightning's import
alone 5.2 s). Each command and the reference alternate, the order flipped every repeat; the table gives median wall
seconds and the ratio of the medians.

    python benchmarks/bench_startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import time

from timing import cpu_name

EMBINIT = [sys.executable, "-m", "lightning_embinit"]
COMMANDS = {
    "embinit --help": ["--help"],
    "embinit report --help": ["report", "--help"],
    "embinit inspect --vocab-size 1000 --dim 64 --source xavier": [
        "inspect",
        "--vocab-size",
        "1000",
        "--dim",
        "64",
        "--source",
        "xavier",
    ],
    "embinit translat (an argument error)": ["translat"],
}
REFERENCE = [sys.executable, "-c", "import torch"]


def wall_seconds(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{cpu_name()}, {os.cpu_count()} cores, {datetime.date.today()}, load average {os.getloadavg()[0]:.1f}")
    print("| command | median s | `import torch` median s | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for name, arguments in COMMANDS.items():
        runs: dict[str, list[float]] = {"command": [], "reference": []}
        pair = {"command": [*EMBINIT, *arguments], "reference": REFERENCE}
        for repeat in range(args.repeats):
            for which in ("command", "reference") if repeat % 2 == 0 else ("reference", "command"):
                runs[which].append(wall_seconds(pair[which]))
        command, reference = (statistics.median(runs[which]) for which in ("command", "reference"))
        print(f"| `{name}` | {command:.2f} | {reference:.2f} | {command / reference:.2f} |", flush=True)


if __name__ == "__main__":
    main()
