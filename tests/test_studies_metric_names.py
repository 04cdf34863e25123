"""A claim on a metric no trial records is refused when the study is read (issue 40), and the names the package
knows are the names its systems really log (tiny fits, no study)."""

from __future__ import annotations

import inspect

import lightning as L
import pytest
from torch.utils.data import DataLoader

import lightning_embinit.models as models
from lightning_embinit.commands import main as cli
from lightning_embinit.models.module import LightningSystem
from lightning_embinit.studies.keys import StudyError
from lightning_embinit.studies.metric_names import MODEL_METRICS, model_metrics
from lightning_embinit.studies.spec import Study
from tests.study_helpers import TIED_LM, tiny_study, write_study
from tests.test_models_stage_order import classifier_case, lm_case
from tests.translation_helpers import TINY, multi30k_data, tokenizer_configs

CLAIM = {"id": "c", "source": "[K]", "says": "x", "setting": "small", "versus": "normal", "direction": "lower"}


def claimed(metric: str, **study: object) -> dict:
    return tiny_study(claims=[{**CLAIM, "metric": metric}], **study)


def inline(model: str, metric: str, callbacks: list | None = None) -> dict:
    """A study over an inline base config with ``model`` (a class path) and ``callbacks``."""
    base = {"model": {"class_path": model}, "trainer": {"callbacks": callbacks or []}}
    claim = {**CLAIM, "setting": "a", "versus": "b", "metric": metric}
    return {"name": "inline", "base": base, "settings": {"a": {}, "b": {}}, "seeds": [0], "claims": [claim]}


def test_a_claim_on_a_misspelt_metric_is_refused_when_the_study_is_read(tmp_path, capsys):
    with pytest.raises(StudyError) as raised:
        Study.from_dict(claimed("val_los"))  # not Study.trials(): the study itself is refused
    message = str(raised.value)
    assert message.startswith(
        "study 'tiny', claim 'c': no trial of setting 'small' records metric 'val_los' (did you mean 'val_loss'?): "
        "its model TiedEmbeddingLM logs train_loss, train_loss_epoch, val_loss, val_ppl, test_loss, test_ppl; "
        "the protocol keeps best_<its monitor>, best_epoch and best_step; every trial records the costs parameters, "
    )
    assert "; its callbacks publish init_loss, " in message and message.endswith("embinit/...")
    path = write_study(tmp_path / "s.yaml", claimed("val_acc"))
    assert cli.main(["sweep", str(path), "--results", str(tmp_path / "r")]) == 2
    assert "records metric 'val_acc': its model TiedEmbeddingLM logs" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    for metric in ("lr-Adam", "epoch", "test_bleu"):  # names no record of this model holds
        with pytest.raises(StudyError, match=f"records metric '{metric}'"):
            Study.from_dict(claimed(metric))


def test_each_system_s_names_pass_and_others_are_refused():
    for metric in ("train_loss", "train_loss_epoch", "val_ppl", "test_loss", "best_val_loss", "init_loss", "fit_s"):
        Study.from_dict(claimed(metric)).trials()
    classifier = "lightning_embinit.models.TransformerClassifier"
    for metric in ("val_acc", "test_f1", "train_acc", "val_matched_acc", "test_mismatched_f1"):
        Study.from_dict(inline(classifier, metric))
    with pytest.raises(StudyError, match=r"'val_bleu'.*: its model TransformerClassifier logs .*per named set\)"):
        Study.from_dict(inline(classifier, "val_bleu"))
    Study.from_dict(inline("lightning_embinit.models.TransformerSeq2Seq", "test_bleu"))
    with pytest.raises(StudyError, match=r"'val_f1'.*its callbacks publish embvar/\.\.\.$"):
        monitor = {"class_path": "lightning_embinit.EmbeddingVarianceMonitor"}
        Study.from_dict(inline("lightning_embinit.models.TransformerSeq2Seq", "val_f1", [monitor]))
    # a model or a callback from outside the package may log any name
    Study.from_dict(inline("my_package.MyModel", "val_anything"))
    foreign = {"class_path": "lightning.pytorch.callbacks.ThroughputMonitor"}
    Study.from_dict(inline(classifier, "val_anything", [foreign]))


def test_a_study_whose_base_cannot_be_read_yet_is_checked_by_its_trials(tmp_path):
    study = Study.from_dict({**claimed("val_los"), "base": str(tmp_path / "later.yaml")})  # read when it exists
    (tmp_path / "later.yaml").write_text(TIED_LM.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(StudyError, match="records metric 'val_los' \\(did you mean 'val_loss'\\?\\)"):
        study.trials()


def test_every_system_the_package_exports_is_known():
    systems = {
        name
        for name, cls in inspect.getmembers(models, inspect.isclass)
        if issubclass(cls, LightningSystem) and not inspect.isabstract(cls) and cls.__module__.startswith("lightning")
    }
    assert systems - {"Seq2SeqModule"} == set(MODEL_METRICS)


def trainer(tmp_path) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        max_steps=2,
        val_check_interval=1,
        limit_val_batches=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )


def seq2seq_case():
    data = multi30k_data(examples=16)
    return models.TransformerSeq2Seq(**tokenizer_configs(data), **TINY), data


@pytest.mark.parametrize(
    "case", [lm_case, classifier_case, seq2seq_case], ids=["TiedEmbeddingLM", "TransformerClassifier", "seq2seq"]
)
def test_the_known_names_are_the_names_the_systems_log(tmp_path, case):
    model, loader = case()
    run = trainer(tmp_path)
    run.fit(model, loader, loader) if isinstance(loader, DataLoader) else run.fit(model, loader)
    logged = set(run.callback_metrics)  # what a record's `final` holds
    tested = trainer(tmp_path).test(model, loader, verbose=False)  # and its `metrics`
    logged |= set(tested[0])
    system = type(model).__name__
    _, names, per_set = model_metrics({"model": {"class_path": f"lightning_embinit.models.{system}"}})
    assert logged == set(names)
    if per_set is not None:  # two validation sets: each logged under its own name, which the pattern knows
        run = trainer(tmp_path)
        run.fit(model, loader, [loader, DataLoader(loader.dataset, batch_size=4)])
        per_loader = {name for name in run.callback_metrics if name.startswith("val_")}
        assert per_loader == {f"val_{k}_{m}" for k in (0, 1) for m in ("loss", "acc", "f1")}
        assert all(per_set.fullmatch(name) for name in per_loader)
