"""A trial's record takes what callbacks publish (``PublishesSummary``), whatever their class: studies name none."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from lightning.pytorch.callbacks import Callback

from lightning_embinit.callbacks import PublishesSummary
from lightning_embinit.studies.local import run_study
from lightning_embinit.studies.outcome import summaries
from lightning_embinit.studies.report import write_report
from lightning_embinit.studies.spec import Study
from tests.study_helpers import tiny_study


class BatchCounter(Callback):
    """A monitor that only this file knows: the training batches it saw."""

    summary_key = "monitors"

    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_end(self, *args: Any) -> None:
        self.batches += 1

    def summary(self) -> dict[str, Any]:
        return {"batch_counter/batches": self.batches, "batch_counter/unmeasured": None}


class Notes(Callback):
    """A callback with a section of its own in the record."""

    summary_key = "notes"

    def __init__(self, text: str = "hello") -> None:
        self.text = text

    def summary(self) -> dict[str, Any]:
        return {"text": self.text}


def test_a_monitor_studies_do_not_know_reaches_the_trial_record_and_the_report(tmp_path):
    counted = {"trainer.callbacks[+]": {"class_path": f"{__name__}.BatchCounter"}}
    study = tiny_study(settings={"counted": counted}, seeds=[0])
    study["overrides"]["trainer.callbacks[+]"] = {"class_path": f"{__name__}.Notes"}
    [record] = run_study(Study.from_dict(study), tmp_path / "results", progress=False)
    assert record["status"] == "done", record["error"]
    assert record["monitors"]["batch_counter/batches"] == 4 and record["monitors"]["batch_counter/unmeasured"] is None
    assert {"init_loss", "ln_vocab", "embinit/tokens/std"} <= set(record["monitors"])  # the known monitors' too
    assert record["notes"] == {"text": "hello"}
    markdown = write_report(tmp_path / "results")["markdown"]
    monitors_table = markdown.split("## Monitors: mean ± std (n) over seeds")[1].split("##")[0]
    assert "batch_counter/batches" in monitors_table.splitlines()[2] and "4 (1)" in monitors_table


def test_summaries_merge_monitors_in_order_and_number_several_callbacks_of_one_section():
    counters = [BatchCounter(), BatchCounter()]
    counters[1].batches = 7
    trainer = SimpleNamespace(callbacks=[Notes("a"), *counters, Callback(), Notes("b")])
    curves = {"batch_counter/batches": [[0, 0, 1.0]], "train_loss": [[0, 0, 2.0]], "x/y_smoothed": [[0, 0, 3.0]]}
    sections = summaries(trainer, {"val_loss": 1.5, "speed": 2.0}, {"curves": curves})
    assert sections == {
        "monitors": {"batch_counter/batches": 7, "speed": 2.0, "batch_counter/unmeasured": None},
        "notes": {"callback_0": {"text": "a"}, "callback_1": {"text": "b"}},
    }
    assert isinstance(counters[0], PublishesSummary) and not isinstance(Callback(), PublishesSummary)


def test_a_summary_under_a_key_the_record_holds_for_itself_is_refused():
    taken = Notes()
    taken.summary_key = "status"
    with pytest.raises(ValueError, match=r"keys the trial record holds for itself: \['status'\]"):
        summaries(SimpleNamespace(callbacks=[taken]), {}, {"curves": {}, "status": "running"})
