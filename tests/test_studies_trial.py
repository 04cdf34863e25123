"""One trial in this process: the protocol's default checkpoint policy and the steps of the record's curves."""

from __future__ import annotations

import pytest

from lightning_embinit.studies.spec import Study
from lightning_embinit.studies.trial import optimizer_steps, run_trial
from tests.study_helpers import tiny_study


def test_the_default_policy_deletes_the_checkpoints_and_curves_count_optimizer_steps_as_best_step(tmp_path):
    [trial] = Study.from_dict(tiny_study(settings={"normal": {}}, seeds=[0])).trials()
    assert trial.protocol.checkpoints == "none"
    record = run_trial(trial, tmp_path)
    assert record["status"] == "done", record["error"]
    assert record["checkpoint"] is None and not list(tmp_path.rglob("*.ckpt"))
    # the tiny study: max_steps 4, val_check_interval 2, log_every_n_steps 1
    assert [row[0] for row in record["curves"]["val_loss"]] == [2, 4]
    assert [row[0] for row in record["curves"]["train_loss"]] == [1, 2, 3, 4]
    best = min(record["curves"]["val_loss"], key=lambda row: row[2])
    assert record["metrics"]["best_step"] == best[0]
    assert record["metrics"]["best_val_loss"] == pytest.approx(best[2])


def test_lightnings_rows_move_one_step_on_and_the_callbacks_rows_stay():
    curves = {
        "val_loss": [[3, 0, 2.5], [19, 0, 2.0]],  # Lightning's: with an epoch
        "learning_speed/val_loss_smoothed": [[4, None, 2.6], [20, None, 2.2]],  # logged at trainer.global_step
        "odd": [[None, 0, 1.0]],
    }
    assert optimizer_steps(curves) == {
        "val_loss": [[4, 0, 2.5], [20, 0, 2.0]],
        "learning_speed/val_loss_smoothed": [[4, None, 2.6], [20, None, 2.2]],
        "odd": [[None, 0, 1.0]],
    }
