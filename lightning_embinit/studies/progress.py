"""What a sweep shows while it runs: a bar over the study's trials with the ETA, a line per finished trial,
and the summary at the end."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def outcome_line(record: dict[str, Any]) -> str:
    """One line about a finished trial: its id, status, wall time and the protocol's best score or its error."""
    wall = record.get("wall_time_s")
    timing = f"{wall:.1f} s" if isinstance(wall, (int, float)) else "-"
    if record.get("status") == "done":
        scores = ", ".join(
            f"{name} {value:.4g}"
            for name, value in (record.get("metrics") or {}).items()
            if name.startswith(("best_", "test_")) and isinstance(value, float)
        )
        return f"done    {record['trial_id']}  {timing}  {scores}"
    error = record.get("error") or {}
    message = next(iter(str(error.get("message") or "").strip().splitlines()), "")
    return f"FAILED  {record['trial_id']}  {timing}  {error.get('type')}: {message}  (log: {record.get('log')})"


class SweepProgress:
    """A rich progress bar over a study's trials (finished earlier ones count as done), on stderr."""

    def __init__(self, study: str, *, total: int, skipped: Sequence[dict[str, Any]], enabled: bool = True) -> None:
        self.study, self.total, self.skipped, self.enabled = study, total, list(skipped), enabled
        self.console = Console(stderr=True, highlight=False)
        self.counts = {"done": 0, "failed": 0}
        self.running: list[str] = []
        self._progress: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> SweepProgress:
        if self.enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("done {task.fields[done]} · failed {task.fields[failed]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[running]}"),
                console=self.console,
            )
            self._progress.start()
            self._task = self._progress.add_task(
                self.study, total=self.total, completed=len(self.skipped), done=0, failed=0, running=""
            )
        if self.skipped:
            self.console.print(f"{self.study}: {len(self.skipped)} of {self.total} trials finished earlier, skipped")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()

    def _update(self, advance: int = 0) -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=advance, running=escape(", ".join(self.running)), **self.counts)

    def started(self, trial_id: str) -> None:
        self.running.append(trial_id)
        self._update()

    def finished(self, record: dict[str, Any]) -> None:
        if record["trial_id"] in self.running:
            self.running.remove(record["trial_id"])
        self.counts["done" if record.get("status") == "done" else "failed"] += 1
        self.console.print(escape(outcome_line(record)), soft_wrap=True)
        self._update(advance=1)

    def summary(self, records: Sequence[dict[str, Any]], results_dir: Path, *, ran: int) -> None:
        """Counts (done / failed this run, skipped, failed earlier and not retried) and each failure's error."""
        kept_failed = sum(record.get("status") == "failed" for record in self.skipped)
        parts = [
            f"ran {ran}: {self.counts['done']} done, {self.counts['failed']} failed",
            f"{len(self.skipped) - kept_failed} skipped (finished earlier)",
        ]
        if kept_failed:
            parts.append(f"{kept_failed} failed earlier, not retried (--retry-failed reruns them)")
        self._update()
        self.console.print(
            f"{self.study}: " + "; ".join(parts) + f". Records: {results_dir / 'trials'}", soft_wrap=True
        )
        for record in records:
            if record.get("status") != "done":
                self.console.print(escape("  " + outcome_line(record)), soft_wrap=True)
