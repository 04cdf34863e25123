"""A results directory: ``study.json``, one record per trial, logs and each trial's own run directory::

    <results>/study.json              the study (name, hash, variant, its mapping, the trials of the variant) and
                                      each sweep into it: its start, end, elapsed time and machine
    <results>/trials/<trial_id>.json  one record per trial (:mod:`.trial` describes the fields)
    <results>/logs/<trial_id>.log     the trial's stdout and stderr
    <results>/runs/<trial_id>/        its merged config, checkpoints, CSV and TensorBoard logs

Every JSON file is written atomically (a temporary file in the same directory, then a rename), so a sweep
killed at any moment leaves each record either as it was or complete.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import tempfile
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lightning_embinit.studies.keys import StudyError, plain
from lightning_embinit.studies.spec import Study, Trial

STUDY_FILE = "study.json"
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
    return Path(results_dir) / "trials" / f"{trial_id}.json"


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
    paths = sorted((results_dir / "trials").glob("*.json"))
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
    elif (Path(results_dir) / "trials").is_dir() and any((Path(results_dir) / "trials").glob("*.json")):
        raise StudyError(
            f"results directory {results_dir} holds trial records but no {STUDY_FILE}: "
            "choose another --results directory"
        )
