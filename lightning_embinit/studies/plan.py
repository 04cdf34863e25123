"""What every engine does before a trial starts: read and check the study, claim the results directory, and
split its trials into those to run and the records kept from earlier runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_embinit.studies.records import STUDY_FILE, check_results_dir, read_record, study_summary, write_json
from lightning_embinit.studies.spec import Study, Trial
from lightning_embinit.studies.validate import validate_trials


@dataclass(frozen=True)
class SweepPlan:
    """A checked study's trials for one variant: all of them, those to run, and the records kept."""

    study: Study
    variant: str | None
    results_dir: Path
    trials: list[Trial]
    to_run: list[Trial]
    kept: list[dict[str, Any]]

    def ordered(self, records: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """The kept records and ``records`` (by trial id) in the study's trial order."""
        found = {**{record["trial_id"]: record for record in self.kept}, **records}
        return [found[trial.trial_id] for trial in self.trials if trial.trial_id in found]


def prepare_sweep(
    study: Study | str | Path, results_dir: str | Path, *, variant: str | None = None, retry_failed: bool = False
) -> SweepPlan:
    """Check everything a sweep needs before any trial starts — the study, every trial's config (the ``embinit``
    parser), the results directory — then write ``study.json`` and plan the trials; StudyError when one fails.

    A record with the trial's config hash is kept when ``done``, or ``failed`` without ``retry_failed``; a changed
    config (another hash) or a missing record runs."""
    study = study if isinstance(study, Study) else Study.from_yaml(study)
    results_dir = Path(results_dir)
    trials = study.trials(variant)
    validate_trials(study, trials)
    check_results_dir(results_dir, study, variant)
    write_json(results_dir / STUDY_FILE, study_summary(study, variant, trials))
    to_run, kept = [], []
    for trial in trials:
        record = read_record(results_dir, trial.trial_id)
        same = record is not None and record.get("config_hash") == trial.config_hash
        if same and (record.get("status") == "done" or (record.get("status") == "failed" and not retry_failed)):
            kept.append(record)
        else:
            to_run.append(trial)
    return SweepPlan(study, variant, results_dir, trials, to_run, kept)
