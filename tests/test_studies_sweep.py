"""Sweeps for real: failing trials recorded while the sweep goes on, --retry-failed, changed settings, a killed
sweep resumed, and the kim_translation smoke study end to end through ``embinit sweep`` and ``embinit report``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

from lightning_embinit.commands import main as cli
from lightning_embinit.studies import Study, run_study, write_report
from lightning_embinit.studies.worker import trial_process_state
from tests.study_helpers import tiny_study, write_study

REPO = Path(__file__).resolve().parent.parent
KIM = REPO / "examples" / "studies" / "kim_translation.yaml"
LR = "model.init_args.optimizer.lr"


def _files(results: Path) -> dict[str, tuple[int, bytes]]:
    """Each record file: (mtime_ns, contents)."""
    return {
        path.name: (path.stat().st_mtime_ns, path.read_bytes()) for path in sorted((results / "trials").glob("*.json"))
    }


def _tiny(settings: dict) -> Study:
    """The tiny study of ``settings`` with seed 0, keeping each trial's best checkpoint."""
    return Study.from_dict(tiny_study(settings=settings, seeds=[0], protocol={"checkpoints": "best"}))


def _strict_json(path: Path) -> dict:
    def refuse(constant: str) -> None:
        raise ValueError(f"{path} holds {constant}")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def test_failed_trials_are_recorded_the_sweep_goes_on_and_only_retry_or_a_changed_setting_reruns(tmp_path):
    settings = {
        "ok": {},
        "nan": {LR: 1.0e30},
        "killed": {"trainer.callbacks[+]": {"class_path": "tests.study_helpers.KillProcess"}},
    }
    results = tmp_path / "results"
    started = time.monotonic()
    records = run_study(_tiny(settings), results, workers=2, progress=False)
    took = time.monotonic() - started
    by_id = {record["trial_id"]: record for record in records}
    assert [record["status"] for record in records] == ["done", "failed", "failed"]

    ok = _strict_json(results / "trials" / "ok-seed0.json")
    assert ok == by_id["ok-seed0"] and ok["error"] is None and ok["study"] == "tiny" and ok["setting"] == "ok"
    assert {"best_val_loss", "best_epoch", "best_step", "val_loss", "val_ppl"} <= set(ok["metrics"])
    assert ok["metrics"]["best_val_loss"] == ok["metrics"]["val_loss"]  # the best checkpoint, validated again
    assert {"init_loss", "ln_vocab", "init_loss_predicted", "embinit/tokens/std"} <= set(ok["monitors"])
    assert {"train_loss", "val_loss", "init_loss"} <= set(ok["curves"]) and len(ok["curves"]["val_loss"]) == 2
    assert (
        ok["init_report"]["tokens"]["source"].startswith("normal:1/sqrt(d)")
        and ok["init_report"]["tokens"]["seed"] == 0
    )
    assert set(ok["versions"]) == {"lightning_embinit", "torch", "lightning", "python"} and ok["host"]["cpu_count"]
    assert (results / ok["log"]).read_text() and (results / ok["checkpoint"]).is_file() and ok["wall_time_s"] > 0
    assert list((results / ok["run_dir"]).rglob("*.ckpt")) == [results / ok["checkpoint"]]  # the best alone
    weights = torch.load(results / ok["checkpoint"], map_location="cpu", weights_only=True)["state_dict"]
    unique = {tensor.untyped_storage().data_ptr(): tensor.numel() for tensor in weights.values()}  # tied table once
    assert ok["cost"]["parameters"] == ok["cost"]["trainable_parameters"] == sum(unique.values())
    assert 0 < ok["cost"]["fit_s"] < ok["wall_time_s"] and ok["cost"]["seconds_per_step"] == pytest.approx(
        ok["cost"]["fit_s"] / 4, rel=0.01
    )
    assert ok["cost"]["seconds_per_epoch"] is None and ok["cost"]["whole_epochs"] == 0  # 4 steps: no whole epoch
    assert by_id["nan-seed0"]["error"]["type"] == "TrialFailure"
    assert "non-finite metrics at the end of fit: train_loss = nan" in by_id["nan-seed0"]["error"]["message"]
    killed = by_id["killed-seed0"]["error"]
    assert killed["type"] == "TrialProcessDied" and "signal SIGKILL (killed: out of memory?)" in killed["message"]
    study = json.loads((results / "study.json").read_text())
    assert study["name"] == "tiny" and study["settings"] == ["ok", "nan", "killed"]
    assert [t["trial_id"] for t in study["trials"]] == ["ok-seed0", "nan-seed0", "killed-seed0"]

    before = _files(results)
    again = run_study(_tiny(settings), results, workers=2, progress=False)
    assert _files(results) == before and [r["status"] for r in again] == ["done", "failed", "failed"]

    retried = run_study(_tiny(settings), results, workers=2, retry_failed=True, progress=False)
    after_retry = _files(results)
    assert after_retry["ok-seed0.json"] == before["ok-seed0.json"]
    assert [r["run_id"] != by_id[r["trial_id"]]["run_id"] for r in retried] == [False, True, True]

    changed = {**settings, "ok": {LR: 0.002}}
    rerun = run_study(_tiny(changed), results, workers=2, progress=False)
    assert rerun[0]["status"] == "done" and rerun[0]["config_hash"] != ok["config_hash"]
    assert rerun[0]["config"]["model"]["init_args"]["optimizer"]["lr"] == 0.002
    assert {k: v for k, v in _files(results).items() if k != "ok-seed0.json"} == {
        k: v for k, v in after_retry.items() if k != "ok-seed0.json"
    }  # failed ones not retried
    sweeps = json.loads((results / "study.json").read_text())["sweeps"]
    assert [(sweep["ran"], sweep["engine"], sweep["workers"]) for sweep in sweeps] == [
        (3, "local", 2),
        (0, "local", 2),
        (2, "local", 2),
        (1, "local", 2),
    ]
    assert ok["wall_time_s"] - 1 <= sweeps[0]["elapsed_s"] <= took + 1  # ISO times: whole seconds
    assert sweeps[0]["machine"]["cores"] == os.cpu_count() and sweeps[0]["machine"]["cpu"]


def test_a_killed_sweep_resumes_skipping_its_finished_trials(tmp_path, capsys):
    study = write_study(tmp_path / "tiny.yaml", tiny_study())
    results = tmp_path / "results"
    command = [
        sys.executable,
        "-m",
        "lightning_embinit",
        "sweep",
        str(study),
        "--results",
        str(results),
        "--workers",
        "1",
        "--threads",
        "1",
        "--no-progress",
    ]
    with open(tmp_path / "first.log", "wb") as log:
        sweep = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 240
        while not list((results / "trials").glob("*.json")) and sweep.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        sweep.send_signal(signal.SIGKILL)
        sweep.wait()
    time.sleep(2.5)  # a trial left running would end within a second
    finished = _files(results)
    assert 1 <= len(finished) < 4, (tmp_path / "first.log").read_text()
    time.sleep(1.0)
    assert _files(results) == finished  # nothing outlived the sweep

    assert cli.main(["sweep", str(study), "--results", str(results), "--workers", "2", "--no-progress"]) == 0
    assert f"{len(finished)} of 4 trials finished earlier, skipped" in capsys.readouterr().err
    resumed = _files(results)
    assert {name: resumed[name] for name in finished} == finished
    records = [_strict_json(results / "trials" / name) for name in resumed]
    assert len(records) == 4 and all(record["status"] == "done" for record in records)
    assert sorted(record["trial_id"] for record in records) == [
        "normal-seed0",
        "normal-seed1",
        "small-seed0",
        "small-seed1",
    ]
    killed, resumed_sweep = json.loads((results / "study.json").read_text())["sweeps"]
    assert "finished" not in killed and resumed_sweep["ran"] == 4 - len(finished) and resumed_sweep["elapsed_s"] >= 0
    assert "did not finish (interrupted or killed): not counted" in write_report(results)["markdown"]


def test_the_kim_translation_smoke_study_runs_end_to_end(shared_data, monkeypatch, tmp_path):
    monkeypatch.setenv("EMBINIT_SHARED_DATA", str(shared_data))
    results = tmp_path / "kim"
    assert (
        cli.main(
            ["sweep", str(KIM), "--variant", "smoke", "--results", str(results), "--workers", "2", "--no-progress"]
        )
        == 0
    )
    records = {path.stem: _strict_json(path) for path in (results / "trials").glob("*.json")}
    settings = [
        "xavier",
        "glove_raw",
        "glove_xavier",
        "glove_shuffled",
        "xavier_matched_to_glove",
        "glove_centered_xavier",
        "glove_abtt_xavier",
        "glove_whitened_xavier",
        "standin_t5_raw",
        "standin_t5_xavier",
        "xavier_d384",
        "minilm_raw",
        "minilm_xavier",
        "minilm_shuffled",
        "xavier_matched_to_minilm",
    ]
    assert sorted(records) == sorted(f"{s}-seed{seed}" for s in settings for seed in (0, 1))
    for record in records.values():
        assert record["status"] == "done" and record["variant"] == "smoke"
        assert {"best_val_loss", "best_epoch", "best_step", "test_loss", "test_bleu"} <= set(record["metrics"])
        assert {"train_loss", "val_loss"} <= set(record["curves"]) and "embinit/tgt/std" in record["monitors"]
        assert {"lexical/tgt/raw+pe/analogy_at_start", "lexical/tgt/raw/analogy"} <= set(record["monitors"])  # Table 4
    tgt = {name: records[f"{name}-seed0"]["init_report"]["tgt"] for name in settings}
    assert tgt["xavier"]["source"] == "xavier" and tgt["xavier"]["coverage"] is None
    assert "glove.6B.50d.multi30k_subset" in tgt["glove_raw"]["source"] and tgt["glove_raw"]["coverage"]["found"] > 0
    assert tgt["glove_xavier"]["transforms"] == ["standardize(xavier)"]
    assert (
        abs(tgt["glove_xavier"]["std"] / tgt["xavier"]["std"] - 1)
        < 0.1
        < abs(tgt["glove_raw"]["std"] / tgt["xavier"]["std"] - 1)
    )
    assert any("shuffle" in step for step in tgt["glove_shuffled"]["transforms"])
    for setting, step in (("centered", "center"), ("abtt", "remove_top"), ("whitened", "whiten")):
        assert tgt[f"glove_{setting}_xavier"]["transforms"] == [step, "standardize(xavier)"]  # removed, then scaled
        assert tgt[f"glove_{setting}_xavier"]["std"] == pytest.approx(tgt["glove_xavier"]["std"], rel=1e-4)
        monitors = records[f"glove_{setting}_xavier-seed0"]["monitors"]
        assert "lexical/tgt/raw/similarity/wordsim353_at_start" in monitors  # SimLex: too few pairs in smoke's words
    shares = [tgt[f"glove_{setting}"]["top_share"] for setting in ("xavier", "abtt_xavier", "whitened_xavier")]
    assert shares == sorted(shares, reverse=True)  # each step takes more of the top direction away
    assert any("match" in step for step in tgt["xavier_matched_to_glove"]["transforms"])
    assert 13 < tgt["standin_t5_raw"]["std"] < 18  # [K]'s T5 spread
    assert tgt["standin_t5_xavier"]["std"] == pytest.approx(tgt["glove_xavier"]["std"], rel=1e-4)
    assert tgt["minilm_raw"]["embedding_dim"] == 384 and tgt["minilm_raw"]["coverage"]["fraction"] == 1.0
    assert records["xavier-seed0"]["config"]["data"]["init_args"]["data_dir"] == f"{shared_data}/multi30k"
    assert cli.main(["report", str(results), "--metrics", "test_bleu,best_val_loss"]) == 0
    assert "kim_translation" in (results / "report" / "summary.md").read_text()


def _warn() -> None:
    warnings.warn("a trial's warning", UserWarning, stacklevel=1)


def test_a_process_running_trials_one_after_another_gets_back_what_each_changed(tmp_path, monkeypatch, capfd):
    """What the Ray engine's reused actors rely on (trial_process_state): each trial starts from the process as the
    previous one found it, and sees the warnings a process of its own would show."""
    shown = []
    monkeypatch.setattr(warnings, "showwarning", lambda message, *args, **kwargs: shown.append(str(message)))
    warnings.simplefilter("default")  # once per location: a second call shows nothing
    _warn()
    _warn()
    assert shown == ["a trial's warning"]
    cwd, log, environment = os.getcwd(), tmp_path / "trial.log", dict(os.environ)
    flags = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark)
    precision = torch.get_float32_matmul_precision()
    for trial in range(2):
        with pytest.raises(RuntimeError) if trial else contextlib.nullcontext(), trial_process_state():
            _warn()  # shown again: as in a fresh process
            os.environ["PL_GLOBAL_SEED"] = f"7{os.environ.get('PL_GLOBAL_SEED', '')}"
            os.environ["EMBINIT_A_TRIALS_VARIABLE"] = "1"
            os.chdir(tmp_path)
            descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(descriptor, 1)
            os.close(descriptor)
            os.write(1, f"trial {trial} into its log\n".encode())
            torch.use_deterministic_algorithms(not flags[0])
            torch.backends.cudnn.benchmark = not flags[1]
            torch.set_float32_matmul_precision("medium" if precision != "medium" else "high")
            warnings.simplefilter("ignore")
            if trial:
                raise RuntimeError("a failing trial is put back too")
        os.write(1, f"after trial {trial}\n".encode())
        assert log.read_text() == f"trial {trial} into its log\n"
        assert dict(os.environ) == environment and os.getcwd() == cwd
        assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark) == flags
        assert torch.get_float32_matmul_precision() == precision
        assert warnings.filters[0][0] == "default"
    assert shown == ["a trial's warning"] * 3
    out = capfd.readouterr().out
    assert "after trial 0" in out and "after trial 1" in out and "into its log" not in out
