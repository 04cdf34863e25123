"""A sweep's results directory as the report reads it: ``study.json`` and the latest record per setting and seed."""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_embinit.studies.keys import StudyError
from lightning_embinit.studies.records import RECORD_SCHEMA, STUDY_FILE
from lightning_embinit.studies.statistics import setting_name

TRIALS_DIR = "trials"


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


def _read_record(path: Path) -> tuple[dict[str, Any] | None, str]:
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
        record, problem = _read_record(path)
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
