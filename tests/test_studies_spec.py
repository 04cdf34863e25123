"""Studies before any trial runs: keys, grids, hashes, variants, and every bad input's one clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lightning_embinit.studies.keys import StudyError, expand_grid, get_key, set_key, split_key, substitute_environment
from lightning_embinit.studies.local import thread_budget
from lightning_embinit.studies.plan import validate_trials
from lightning_embinit.studies.records import check_results_dir, study_summary, write_json
from lightning_embinit.studies.spec import Study
from tests.study_helpers import tiny_study, write_study

KIM = Path(__file__).resolve().parent.parent / "examples" / "studies" / "kim_translation.yaml"
SOURCE = "trainer.callbacks[EmbeddingInitCallback].init_args.source"


def test_keys_walk_mappings_list_indices_and_callbacks_by_class():
    config = {
        "trainer": {
            "callbacks": [
                {"class_path": "lightning_embinit.EmbeddingInitCallback", "init_args": {"source": "xavier"}},
                "lightning.pytorch.callbacks.ModelCheckpoint",
            ]
        }
    }
    assert split_key("trainer.callbacks[0].init_args.source") == ["trainer", "callbacks", 0, "init_args", "source"]
    set_key(config, "trainer.callbacks[EmbeddingInitCallback].init_args.source", "glove")
    set_key(config, "trainer.callbacks.1.init_args.monitor", "val_loss")  # a bare class path becomes a mapping
    set_key(config, "trainer.callbacks[+]", {"class_path": "lightning_embinit.InitialLossMonitor"})
    set_key(config, "model.init_args.architecture.d_model", 50)  # missing mappings are created
    assert get_key(config, "trainer.callbacks[0].init_args.source") == "glove"
    assert config["trainer"]["callbacks"][1] == {
        "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
        "init_args": {"monitor": "val_loss"},
    }
    assert len(config["trainer"]["callbacks"]) == 3 and config["model"]["init_args"]["architecture"]["d_model"] == 50
    with pytest.raises(
        StudyError,
        match=r"no entry with class 'LexicalProbe' in the list \(classes: "
        r"lightning_embinit.EmbeddingInitCallback, .*use an index",
    ):
        set_key(config, "trainer.callbacks[LexicalProbe].init_args.slot", "tgt")
    with pytest.raises(StudyError, match="index 7 is outside the list of 3 entries"):
        set_key(config, "trainer.callbacks[7].init_args.x", 1)
    with pytest.raises(StudyError, match="malformed config key"):
        split_key("trainer..callbacks")


def test_environment_substitution_with_defaults(monkeypatch):
    monkeypatch.setenv("EMBINIT_TEST_DIR", "/data")
    monkeypatch.delenv("EMBINIT_UNSET", raising=False)
    assert substitute_environment({"a": ["${EMBINIT_TEST_DIR}/x", "${EMBINIT_UNSET:-../shared}/y", 3]}) == {
        "a": ["/data/x", "../shared/y", 3]
    }
    with pytest.raises(StudyError, match="environment variable EMBINIT_UNSET .* is not set"):
        substitute_environment("${EMBINIT_UNSET}/z")


def test_grid_settings_are_the_product_of_key_axes_and_named_groups():
    grid = {
        "model.init_args.architecture.positional": ["interleaved", "none"],
        "init": {"xavier": {}, "glove": {SOURCE: "glove"}},
        "trainer.callbacks[EmbeddingInitCallback].init_args.trainable": [True, False],
    }
    settings = expand_grid(grid)
    assert list(settings)[:2] == [
        "positional=interleaved,init=xavier,trainable=true",
        "positional=interleaved,init=xavier,trainable=false",
    ]
    assert len(settings) == 8
    assert settings["positional=none,init=glove,trainable=false"] == {
        "model.init_args.architecture.positional": "none",
        SOURCE: "glove",
        "trainer.callbacks[EmbeddingInitCallback].init_args.trainable": False,
    }
    with pytest.raises(StudyError, match="empty grid: axis 'init' has no values"):
        expand_grid({"init": {}})


def test_the_config_hash_follows_the_config_seed_and_protocol():
    trials = Study.from_dict(tiny_study()).trials()
    assert [t.trial_id for t in trials] == ["normal-seed0", "normal-seed1", "small-seed0", "small-seed1"]
    again = Study.from_dict(tiny_study()).trials()
    assert [t.config_hash for t in trials] == [t.config_hash for t in again]
    assert len({t.config_hash for t in trials}) == 4  # each setting × seed its own
    assert get_key(trials[1].config, "trainer.callbacks[EmbeddingInitCallback].init_args.seed") == 1
    assert trials[1].config["seed_everything"] == 1
    changed = tiny_study()
    changed["settings"]["small"][SOURCE] = "normal:0.03"
    changed_trials = Study.from_dict(changed).trials()
    assert [t.config_hash for t in changed_trials[:2]] == [t.config_hash for t in trials[:2]]
    assert {t.config_hash for t in changed_trials[2:]}.isdisjoint({t.config_hash for t in trials})
    other_protocol = Study.from_dict(tiny_study(protocol={"monitor": "val_ppl"})).trials()
    assert other_protocol[0].config_hash != trials[0].config_hash


def test_the_config_hash_follows_what_an_environment_variable_names(monkeypatch, tmp_path):
    """A variable naming another checkpoint is a new trial, not a silent reuse of the old record."""
    study = tiny_study()
    study["settings"]["small"][SOURCE] = "checkpoint:${EMBINIT_TEST_CKPT}"
    hashes = {}
    for name in ("a.ckpt", "b.ckpt", "a.ckpt"):
        monkeypatch.setenv("EMBINIT_TEST_CKPT", str(tmp_path / name))
        trials = Study.from_dict(study).trials()
        assert get_key(trials[2].config, SOURCE) == f"checkpoint:{tmp_path / name}"
        hashes.setdefault(name, []).append([t.config_hash for t in trials])
    assert hashes["a.ckpt"][0] == hashes["a.ckpt"][1]  # same value, same trials
    assert hashes["a.ckpt"][0][:2] == hashes["b.ckpt"][0][:2]  # settings without it unchanged
    assert set(hashes["a.ckpt"][0][2:]).isdisjoint(hashes["b.ckpt"][0][2:])


def test_variants_layer_their_overrides_and_seeds():
    study = Study.from_dict(
        tiny_study(
            variants={
                "smoke": {"seeds": [5], "trainer.max_steps": 2},
                "long": {"overrides": {"trainer.max_steps": 100}},
            }
        )
    )
    smoke = study.trials("smoke")
    assert [t.seed for t in smoke] == [5, 5] and smoke[0].config["trainer"]["max_steps"] == 2
    assert study.trials("long")[0].config["trainer"]["max_steps"] == 100 and len(study.trials("long")) == 4
    assert study.trials()[0].config["trainer"]["max_steps"] == 4
    with pytest.raises(ValueError, match="unknown variant 'medium'; choose one of: smoke, long"):
        study.trials("medium")


def test_a_study_round_trips_through_its_mapping_and_yaml(tmp_path):
    study = Study.from_dict(tiny_study(grid={"model.init_args.optimizer.lr": [0.001, 0.01]}))
    assert Study.from_dict(study.to_dict()) == study
    assert Study.from_dict(json.loads(json.dumps(study.to_dict()))).study_hash == study.study_hash
    assert study.setting_names() == ["normal", "small", "lr=0.001", "lr=0.01"] and study.reference_setting == "normal"
    loaded = Study.from_yaml(write_study(tmp_path / "s.yaml", {**tiny_study(), "base": "tied.yaml"}))
    assert loaded.base == str((tmp_path / "tied.yaml").resolve())  # relative to the study file


def test_the_kim_translation_study_reads_and_every_config_parses(shared_data, monkeypatch):
    monkeypatch.setenv("EMBINIT_SHARED_DATA", str(shared_data))
    study = Study.from_yaml(KIM)
    assert study.setting_names() == [
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
    assert set(study.variants) == {"smoke", "medium", "medium_directions", "full"}
    assert len(study.variants["medium"].seeds) >= 3
    trials = study.trials("smoke")
    validate_trials(study, trials)
    glove = get_key(trials[4].config, "trainer.callbacks[EmbeddingInitCallback].init_args.slots.tgt.source")
    assert glove == f"file:{shared_data}/glove/glove.6B.50d.multi30k_subset.txt.gz"
    assert trials[0].config["model"]["init_args"]["architecture"]["d_model"] == 50


# ---------------------------------------------------------------------------------------------- bad input


def _error(study: dict, variant: str | None = None) -> str:
    with pytest.raises(StudyError) as caught:
        built = Study.from_dict(study)
        validate_trials(built, built.trials(variant))
    return str(caught.value)


def test_an_unknown_config_key_names_the_setting_key_and_class():
    message = _error(
        tiny_study(
            settings={"ok": {}, "typo": {"trainer.callbacks[EmbeddingInitCallback].init_args.standardise": "xavier"}}
        )
    )
    assert message == (
        "study 'tiny', setting 'typo': key 'trainer.callbacks[EmbeddingInitCallback].init_args.standardise'"
        " = 'xavier': lightning_embinit.EmbeddingInitCallback: Option 'standardise' is not accepted"
    )
    message = _error(tiny_study(variants={"smoke": {"trainer.max_stepz": 3}}), "smoke")
    assert "key 'trainer.max_stepz' = 3 (variant 'smoke')" in message and "max_stepz" in message.split(": ", 3)[-1]


def test_a_grid_value_of_the_wrong_type_names_the_setting_key_and_the_parser_reason():
    message = _error(tiny_study(settings={}, grid={"model.init_args.architecture.d_model": [16, "wide"]}))
    assert message.startswith(
        "study 'tiny', setting 'd_model=wide': key 'model.init_args.architecture.d_model' = 'wide': "
    )
    assert (
        "lightning_embinit.models.TiedEmbeddingLM" in message and "Expected a <class 'int'>. Got value: wide" in message
    )


def test_no_settings_an_empty_grid_no_seeds_and_unknown_study_keys_are_refused(tmp_path):
    with pytest.raises(StudyError, match="study 'tiny' has no settings: give settings: .* or grid:"):
        Study.from_dict(tiny_study(settings={}))
    with pytest.raises(StudyError, match="empty grid: axis 'model.init_args.optimizer.lr' has no values"):
        Study.from_dict(tiny_study(grid={"model.init_args.optimizer.lr": []}))
    with pytest.raises(StudyError, match=r"study 'tiny' has no seeds: neither the study gives seeds: \[0, 1, 2\]"):
        Study.from_dict(tiny_study(seeds=[])).trials()
    path = write_study(tmp_path / "bad.yaml", {**tiny_study(), "setings": {}})
    with pytest.raises(StudyError, match=rf"study file {path}: unknown study key \['setings'\]; valid: name, "):
        Study.from_yaml(path)
    with pytest.raises(StudyError, match="base config .*missing.yaml does not exist"):
        Study.from_dict({**tiny_study(), "base": str(tmp_path / "missing.yaml")}).trials()


def test_a_results_directory_of_another_study_or_variant_is_refused(tmp_path):
    other = Study.from_dict(tiny_study(name="other"))
    write_json(tmp_path / "study.json", study_summary(other, None, other.trials()))
    mine = Study.from_dict(tiny_study())
    with pytest.raises(
        StudyError,
        match=rf"results directory {tmp_path} holds study 'other' \({tmp_path}/study.json\), "
        "not 'tiny': choose another --results directory",
    ):
        check_results_dir(tmp_path, mine, None)
    check_results_dir(tmp_path, other, None)
    with pytest.raises(StudyError, match="holds variant None of study 'other'.*not 'smoke'"):
        check_results_dir(tmp_path, other, "smoke")


def test_the_thread_budget_is_checked_against_the_cores():
    assert thread_budget(2, None, cores=8) == 4 and thread_budget(3, 2, cores=8) == 2
    with pytest.raises(StudyError, match="--workers 3 × --threads 2 = 6 threads, more than the 4 cores here"):
        thread_budget(3, 2, cores=4)


def test_engine_ray_without_ray_names_the_install_command(monkeypatch, tmp_path, capsys):
    import importlib.util

    from lightning_embinit.commands import main as cli

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    study = write_study(tmp_path / "s.yaml", tiny_study())
    assert cli.main(["sweep", str(study), "--engine", "ray", "--results", str(tmp_path / "r")]) == 2
    assert "pip install 'lightning_embinit[ray]'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
