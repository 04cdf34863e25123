"""A results directory: ``study.json``, one record per trial, logs and each trial's own run directory::

    <results>/study.json              the study (name, hash, variant, its mapping, the trials of the variant) and
                                      each sweep into it: its start, end, elapsed time and machine
    <results>/trials/<trial_id>.json  one record per trial (docs/studies.md#records-and-the-report)
    <results>/logs/<trial_id>.log     the trial's stdout and stderr
    <results>/runs/<trial_id>/        its merged config, checkpoints, CSV and TensorBoard logs

Every JSON file is written atomically (a temporary file in the same directory, then a rename), so a sweep
killed at any moment leaves each record either as it was or complete. :func:`load_results` reads the directory as the
report does: ``study.json`` and the latest current record per setting and seed.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lightning_embinit.studies.keys import StudyError, plain
from lightning_embinit.studies.spec import Study, Trial
from lightning_embinit.studies.statistics import setting_name

STUDY_FILE = "study.json"
TRIALS_DIR = "trials"
RECORD_SCHEMA = 1


def now() -> str:
    """The current time, ISO 8601 with the UTC offset."""
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s, else the platform's), or ``unknown``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as stream:
            for line in stream:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine() -> dict[str, Any]:
    """The machine a sweep runs on: ``hostname``, ``platform``, ``cpu`` (its model), ``cores`` (logical ones) and
    ``usable_cores`` (those this process may run on)."""
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": available_cores(),
    }


def write_json(path: str | Path, data: Any) -> Path:
    """Write ``data`` (made JSON-safe by :func:`~.keys.plain`) to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(plain(data), stream, indent=1, ensure_ascii=False, allow_nan=False)
            stream.write("\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def read_json(path: str | Path) -> Any | None:
    """The JSON in ``path``; None when it is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def record_path(results_dir: str | Path, trial_id: str) -> Path:
    return Path(results_dir) / TRIALS_DIR / f"{trial_id}.json"


def log_path(results_dir: str | Path, trial_id: str) -> Path:
    return Path(results_dir) / "logs" / f"{trial_id}.log"


def run_dir(results_dir: str | Path, trial_id: str) -> Path:
    return Path(results_dir) / "runs" / trial_id


def read_record(results_dir: str | Path, trial_id: str) -> dict[str, Any] | None:
    record = read_json(record_path(results_dir, trial_id))
    return record if isinstance(record, dict) else None


def read_records(results_dir: str | Path, *, current_only: bool = True) -> list[dict[str, Any]]:
    """The trial records of a results directory; with ``current_only`` (and a ``study.json``), only the records of
    the study's current trials (same id and config hash), in the study's order."""
    results_dir = Path(results_dir)
    study = read_json(results_dir / STUDY_FILE)
    if current_only and isinstance(study, dict) and isinstance(study.get("trials"), list):
        found = [(read_record(results_dir, entry["trial_id"]), entry.get("config_hash")) for entry in study["trials"]]
        return [record for record, expected in found if record is not None and record.get("config_hash") == expected]
    paths = sorted((results_dir / TRIALS_DIR).glob("*.json"))
    return [record for record in map(read_json, paths) if isinstance(record, dict)]


def study_summary(
    study: Study, variant: str | None, trials: Sequence[Trial], earlier: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What ``study.json`` holds: ``name``, ``hash``, ``variant``, ``study`` (:meth:`Study.to_dict`), ``file``,
    ``reference`` and ``settings`` (every setting name, the grid's included), ``seeds``, ``updated``, ``trials``
    (``trial_id``, ``setting``, ``seed``, ``config_hash`` of each current trial) and ``sweeps``: the ``earlier``
    ``study.json``'s, then this sweep's ``started`` and ``machine`` (:func:`machine`); :func:`finish_sweep` adds
    the rest."""
    sweeps = earlier.get("sweeps") if isinstance(earlier, Mapping) else None
    return {
        "name": study.name,
        "hash": study.study_hash,
        "variant": variant,
        "study": study.to_dict(),
        "file": study.path,
        "reference": study.reference_setting,
        "settings": study.setting_names(),
        "seeds": sorted({trial.seed for trial in trials}),
        "updated": now(),
        "trials": [
            {"trial_id": t.trial_id, "setting": t.setting, "seed": t.seed, "config_hash": t.config_hash} for t in trials
        ],
        "sweeps": [*(sweeps if isinstance(sweeps, list) else []), {"started": now(), "machine": machine()}],
    }


def finish_sweep(results_dir: str | Path, **details: Any) -> dict[str, Any]:
    """Complete the last entry of ``study.json``'s ``sweeps``: ``finished``, ``elapsed_s`` (since ``started``, on
    the sweep's own clock) and ``details`` (the engine, its workers, threads, the trials it ran); the entry."""
    path = Path(results_dir) / STUDY_FILE
    header = read_json(path)
    sweep = header["sweeps"][-1]
    finished = now()
    elapsed = datetime.fromisoformat(finished) - datetime.fromisoformat(sweep["started"])
    sweep.update(finished=finished, elapsed_s=elapsed.total_seconds(), **details)
    write_json(path, header)
    return sweep


def check_results_dir(results_dir: str | Path, study: Study, variant: str | None) -> None:
    """StudyError when ``results_dir`` holds another study's results (or another variant's)."""
    path = Path(results_dir) / STUDY_FILE
    if path.exists():
        found = read_json(path)
        if not isinstance(found, Mapping):
            raise StudyError(f"results directory {results_dir}: {path} is not a study file; choose another --results")
        if found.get("name") != study.name:
            raise StudyError(
                f"results directory {results_dir} holds study {found.get('name')!r} ({path}), "
                f"not {study.name!r}: choose another --results directory"
            )
        if found.get("variant") != variant:
            raise StudyError(
                f"results directory {results_dir} holds variant {found.get('variant')!r} of study "
                f"{study.name!r} ({path}), not {variant!r}: choose another --results directory"
            )
    elif any((Path(results_dir) / TRIALS_DIR).glob("*.json")):
        raise StudyError(
            f"results directory {results_dir} holds trial records but no {STUDY_FILE}: "
            "choose another --results directory"
        )


class ReportError(StudyError):
    """A results directory the report cannot read: it names the directory and what is missing."""


@dataclass
class Results:
    """A results directory as read: ``study.json``'s fields, the current trial records, what was left out (the
    trial ids of ``superseded`` records, the file names of ``unreadable`` and ``stale`` ones)."""

    directory: Path
    header: dict[str, Any]
    records: list[dict[str, Any]]
    superseded: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)

    @property
    def study(self) -> dict[str, Any]:
        study = self.header.get("study")
        return study if isinstance(study, dict) else {}

    @property
    def name(self) -> str:
        return str(self.header.get("name") or self.study.get("name") or self.directory.name)


def _latest_per_trial(found: dict[Path, dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """One record per (setting, seed): the latest written; the older ones' trial ids (a setting changed since)."""
    latest: dict[Any, dict[str, Any]] = {}
    superseded = []
    for path in sorted(found, key=lambda path: (path.stat().st_mtime, path.name)):
        record = found[path]
        seed = record.get("seed")
        key = (setting_name(record), seed) if seed is not None else ("", record.get("trial_id", path.name))
        if key in latest:
            superseded.append(str(latest[key].get("trial_id", "?")))
        latest[key] = record
    return list(latest.values()), superseded


def _parse_record(path: Path) -> tuple[dict[str, Any] | None, str]:
    """(the trial record in ``path``, "") or (None, why it is not one)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return None, str(error)
    if not isinstance(record, dict):
        return None, f"it holds JSON {json.dumps(record)[:40]}, not a trial record (an object)"
    if record.get("schema", RECORD_SCHEMA) != RECORD_SCHEMA or not {"setting", "status"} <= set(record):
        return None, f"not a trial record of schema {RECORD_SCHEMA} (with setting and status)"
    return record, ""


def _current(record: dict[str, Any], trials: Any) -> bool:
    """Whether ``record`` is one of ``study.json``'s ``trials`` with the same config hash (True when it lists none)."""
    if not isinstance(trials, list):
        return True
    expected = {entry.get("trial_id"): entry.get("config_hash") for entry in trials if isinstance(entry, Mapping)}
    return record.get("trial_id") in expected and record.get("config_hash") == expected[record["trial_id"]]


def load_results(results_dir: str | Path) -> Results:
    """Read ``study.json`` and ``trials/*.json``; a ReportError naming the directory when either is missing.

    A record that cannot be read (not JSON, not an object, another schema) is left out with a warning, and so is a
    stale or foreign one: a trial ``study.json`` does not list with that config hash (a setting changed since and
    not rerun yet, or another study's record). Of several records of the same setting and seed, the latest written
    counts.
    """
    directory = Path(results_dir)
    if not directory.is_dir():
        how = "is a file, not a directory" if directory.exists() else "does not exist"
        raise ReportError(f"results directory {directory} {how}: give the --results directory of `embinit sweep`")
    study_path = directory / STUDY_FILE
    if not study_path.is_file():
        raise ReportError(f"{directory} has no {STUDY_FILE}: not a results directory written by `embinit sweep`")
    try:
        header = json.loads(study_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ReportError(f"{study_path} is not readable JSON: {error}") from error
    if not isinstance(header, dict):
        raise ReportError(f"{study_path} holds no study (a JSON object with name, hash, variant, study)")
    found: dict[Path, dict[str, Any]] = {}
    unreadable, stale = [], []
    for path in sorted((directory / TRIALS_DIR).glob("*.json")):
        record, problem = _parse_record(path)
        if record is not None and not _current(record, header.get("trials")):
            problem = (
                f"{STUDY_FILE} lists no trial {record.get('trial_id')!r} with config hash {record.get('config_hash')!r}"
            )
        if problem:
            warnings.warn(f"trial record {path} left out: {problem}", stacklevel=2)
            (unreadable if record is None else stale).append(path.name)
        else:
            found[path] = record
    if not found:
        left = f", only records left out ({', '.join(unreadable + stale)})" if unreadable or stale else ""
        raise ReportError(f"{directory} has no trial records ({TRIALS_DIR}/*.json){left}: run the sweep first")
    records, superseded = _latest_per_trial(found)
    return Results(directory, header, records, superseded, unreadable, stale)


def study_settings(study: Mapping[str, Any]) -> list[str]:
    """The names of a study's settings in order: a mapping's keys, or a list of names or of dicts with ``name``."""
    settings = study.get("settings") or []
    if isinstance(settings, Mapping):
        return [str(name) for name in settings]
    return [str(item.get("name")) if isinstance(item, Mapping) else str(item) for item in settings]


def declared_settings(results: Results) -> list[str]:
    """Every setting of the study in order, grid ones included (``study.json``'s list; else the study's own)."""
    return [str(name) for name in results.header.get("settings") or []] or study_settings(results.study)


def settings_with_records(results: Results) -> tuple[list[str], list[str]]:
    """The settings that have records: the study's in its order, then those it does not list; the latter."""
    declared = declared_settings(results)
    seen = list(dict.fromkeys(setting_name(record) for record in results.records))
    extra = [s for s in seen if s not in declared] if declared else []
    return [s for s in declared if s in seen] + extra, extra
