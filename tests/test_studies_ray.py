"""The Ray engine on a local Ray instance: the same trials, records and report as the local engine.

Ray is an optional extra (``lightning_embinit[ray]``): without it these tests skip, also under ``CI=true`` (the README's
test command on a fresh clone); CI installs the extra and sets ``EMBINIT_REQUIRE_RAY=1``, so there a missing Ray is a
failure."""

from __future__ import annotations

import importlib.util
import json
import os
import signal

import pytest

from lightning_embinit.studies.records import read_records
from lightning_embinit.studies.report import write_report
from lightning_embinit.studies.spec import Study
from lightning_embinit.studies.trial import run_trial
from tests.study_helpers import tiny_study, write_study

if importlib.util.find_spec("ray") is None:
    if os.environ.get("EMBINIT_REQUIRE_RAY") == "1":
        raise RuntimeError("EMBINIT_REQUIRE_RAY=1: the Ray engine's tests must run; pip install -e '.[ray]'")
    pytest.skip("Ray is not installed (pip install 'lightning_embinit[ray]')", allow_module_level=True)


def niceness() -> int:
    return os.nice(0)


def test_trials_on_a_running_ray_instance_write_the_records_the_report_reads_and_ctrl_c_fails_none(tmp_path):
    """On a Ray instance already running (as on a cluster: the engine neither starts nor stops it), a finished, a
    failed and an interrupted trial, one after another in one reused actor (the third one's callback sends SIGINT to
    this process, as Ctrl-C would): the interrupted one gets no record, the sweep raises KeyboardInterrupt as the
    local engine does and leaves the SIGINT handler as it found it (Tune's would swallow a later Ctrl-C); the
    finished ones are recorded as the report reads them, with the numbers the same trial gives in this process."""
    import ray

    from lightning_embinit.studies.ray_engine import run_study_on_ray, start_ray

    interrupt = {
        "trainer.callbacks[+]": {
            "class_path": "tests.test_faults_studies.InterruptSweep",
            "init_args": {"pid": os.getpid()},
        },
        "trainer.max_steps": 1000,
    }
    one_batch = {"trainer.limit_val_batches": 1}  # one batch, not 1.0 (every batch) as a Ray worker once parsed it
    settings = {"normal": one_batch, "broken": {"model.init_args.optimizer.lr": 1e30}, "interrupted": interrupt}
    study = Study.from_dict(tiny_study(settings=settings, seeds=[0]))
    results = tmp_path / "results"
    handler = signal.getsignal(signal.SIGINT)
    start_ray()  # the engine's own local start, here before the engine is called: an instance already running
    try:
        assert ray.get(ray.remote(niceness).remote()) == niceness()  # trials at this process's priority, not Ray's 15
        with pytest.raises(KeyboardInterrupt):
            run_study_on_ray(study, results, threads=1, workers=1, progress=False)
        assert ray.is_initialized()  # not the engine's to stop
    finally:
        ray.shutdown()
    assert signal.getsignal(signal.SIGINT) is handler
    assert (results / ".sweep.lock").read_text() == ""
    by_setting = {record["setting"]: record for record in read_records(results)}
    assert set(by_setting) == {"normal", "broken"}  # the interrupted trial: no record, not a failure
    assert by_setting["normal"]["status"] == "done" and by_setting["normal"]["metrics"]["best_val_loss"] > 0
    assert by_setting["broken"]["status"] == "failed" and "finite" in json.dumps(by_setting["broken"]["error"]).lower()
    assert (results / by_setting["normal"]["log"]).stat().st_size > 0  # the trial's own log
    [normal] = [trial for trial in study.trials() if trial.setting == "normal"]
    here = run_trial(normal.to_dict(), tmp_path / "here", run_id="here")  # the same trial in this process
    assert by_setting["normal"]["metrics"] == here["metrics"] and by_setting["normal"]["curves"] == here["curves"]
    report = write_report(results)
    assert report["failed"] == 1 and "normal" in report["markdown"]
    assert "finished" not in json.loads((results / "study.json").read_text())["sweeps"][0]  # interrupted


@pytest.mark.slow
def test_one_trial_as_a_two_worker_ddp_run_on_ray_train(tmp_path):
    """`--engine ray --ddp-workers 2`: a Tune trial starts a TorchTrainer of 2 gloo workers (RayDDPStrategy,
    RayLightningEnvironment, prepare_trainer); rank 0's record reaches the results, and Ray keeps no checkpoint."""
    from lightning_embinit.commands import main as cli

    best = {"checkpoints": "best"}
    study = write_study(tmp_path / "tiny.yaml", tiny_study(settings={"normal": {}}, seeds=[0], protocol=best))
    results = tmp_path / "results"
    code = cli.main(
        [
            "sweep",
            str(study),
            "--engine",
            "ray",
            "--ddp-workers",
            "2",
            "--threads",
            "1",
            "--results",
            str(results),
            "--no-progress",
        ]
    )
    [record] = read_records(results)
    assert code == 0 and record["status"] == "done", record.get("error")
    assert record["trained"]["world_size"] == 2 and record["trained"]["steps"] == 4
    assert record["metrics"]["best_val_loss"] > 0 and (results / record["checkpoint"]).is_file()
    assert [path.relative_to(results).as_posix() for path in results.rglob("*.ckpt")] == [record["checkpoint"]]
    assert (results / "logs" / "normal-seed0.log").stat().st_size > 0
    assert (results / "logs" / "normal-seed0.rank1.log").is_file()  # the second worker's own log
    sweeps = json.loads((results / "study.json").read_text())["sweeps"]
    assert [(s["engine"], s["threads"], s["ddp_workers"], s["ran"]) for s in sweeps] == [("ray", 1, 2, 1)]
    again = cli.main(["sweep", str(study), "--engine", "ray", "--results", str(results), "--no-progress"])
    assert again == 0 and [record["run_id"] for record in read_records(results)] == [record["run_id"]]  # resumed
    assert "normal" in write_report(results)["markdown"]


def test_ddp_workers_need_the_ray_engine(tmp_path, capsys):
    from lightning_embinit.commands import main as cli

    study = write_study(tmp_path / "tiny.yaml", tiny_study(seeds=[0]))
    assert cli.main(["sweep", str(study), "--ddp-workers", "2", "--results", str(tmp_path / "r")]) == 2
    assert "--ddp-workers 2 needs --engine ray" in capsys.readouterr().err and not (tmp_path / "r").exists()
