"""Checkpoints given where they do not belong: another system's checkpoint names the class that saved it (or, when
it records none, what it holds), and a directory is named as a directory at every entry point."""

import lightning as L
import pytest
import torch

from lightning_embinit.callbacks import VocabularyExtensionCallback
from lightning_embinit.commands import main as cli
from lightning_embinit.init.sources import resolve_source
from lightning_embinit.models import TiedEmbeddingLM, TransformerClassifier
from tests.test_cli import CONFIG, SMALL

ARCHITECTURE = {"d_model": 8, "num_heads": 2, "num_layers": 1, "ffn_dim": 8, "max_len": 16}


def save(model: L.LightningModule, path, *, record_class: bool = True) -> str:
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.strategy.connect(model)
    trainer.save_checkpoint(path)
    if not record_class:  # as a checkpoint of another LightningModule, or one whose record was stripped
        checkpoint = torch.load(path, weights_only=True)
        del checkpoint["embinit_class"]
        torch.save(checkpoint, path)
    return str(path)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    directory = tmp_path_factory.mktemp("checkpoints")
    classifier = TransformerClassifier(vocab_size=12, num_classes=2, architecture=ARCHITECTURE)
    language_model = TiedEmbeddingLM(vocab_size=12, architecture=ARCHITECTURE)
    return {
        "classifier": save(classifier, directory / "classifier.ckpt"),
        "lm": save(language_model, directory / "lm.ckpt"),
        "classifier_unnamed": save(classifier, directory / "classifier_unnamed.ckpt", record_class=False),
        "lm_unnamed": save(language_model, directory / "lm_unnamed.ckpt", record_class=False),
    }


def test_another_systems_checkpoint_names_both_classes(checkpoints):
    with pytest.raises(
        ValueError,
        match=r"classifier.ckpt was saved by TransformerClassifier, not by TiedEmbeddingLM: load it with "
        r"TransformerClassifier.load_from_checkpoint",
    ):
        TiedEmbeddingLM.load_from_checkpoint(checkpoints["classifier"])
    with pytest.raises(
        ValueError,
        match=r"lm.ckpt was saved by TiedEmbeddingLM, not by TransformerClassifier: load it with "
        r"TiedEmbeddingLM.load_from_checkpoint",
    ):
        TransformerClassifier.load_from_checkpoint(checkpoints["lm"])


def test_a_checkpoint_that_records_no_class_names_what_it_holds(checkpoints):
    with pytest.raises(
        ValueError,
        match=r"classifier_unnamed.ckpt does not fit TiedEmbeddingLM \(saved by a class it does not record; its "
        r"hyper_parameters: num_classes, architecture, .*label_names; if another class saved it, load it with that "
        r"class's load_from_checkpoint\): architecture: CausalLMConfig has no field",
    ):
        TiedEmbeddingLM.load_from_checkpoint(checkpoints["classifier_unnamed"])
    with pytest.raises(ValueError, match=r"lm_unnamed.ckpt does not fit TransformerClassifier \(saved by a class it"):
        TransformerClassifier.load_from_checkpoint(checkpoints["lm_unnamed"])
    assert isinstance(TiedEmbeddingLM.load_from_checkpoint(checkpoints["lm_unnamed"]), TiedEmbeddingLM)


def test_a_class_recorded_but_not_importable_is_named(checkpoints, tmp_path):
    checkpoint = torch.load(checkpoints["classifier"], weights_only=True)
    checkpoint["embinit_class"] = "my_experiments.models.MyClassifier"
    torch.save(checkpoint, tmp_path / "mine.ckpt")
    with pytest.raises(
        ValueError,
        match=r"mine.ckpt does not fit TiedEmbeddingLM \(saved by my_experiments.models.MyClassifier, as it records, "
        r"which does not import here; if another class saved it",
    ):
        TiedEmbeddingLM.load_from_checkpoint(tmp_path / "mine.ckpt")


DIRECTORY_MESSAGE = r" is a directory, not a checkpoint file: name a checkpoint file inside it"


def test_a_directory_is_no_checkpoint_for_load_from_checkpoint(checkpoints, tmp_path):
    with pytest.raises(ValueError, match=rf"checkpoint {tmp_path}{DIRECTORY_MESSAGE}$"):
        TiedEmbeddingLM.load_from_checkpoint(tmp_path)
    directory = str(tmp_path.parent)
    with pytest.raises(ValueError, match=rf"checkpoint {directory}{DIRECTORY_MESSAGE}"):
        TiedEmbeddingLM.load_from_checkpoint(directory)
    holding = checkpoints["lm"].rsplit("/", 1)[0]
    with pytest.raises(ValueError, match=rf"{DIRECTORY_MESSAGE} \(it holds classifier.ckpt, .*lm.ckpt"):
        TiedEmbeddingLM.load_from_checkpoint(holding)


def test_a_directory_is_no_checkpoint_for_the_extension_callback_and_source(tmp_path):
    with pytest.raises(ValueError, match=rf"from_checkpoint='{tmp_path}'{DIRECTORY_MESSAGE}"):
        VocabularyExtensionCallback(from_checkpoint=str(tmp_path))
    with pytest.raises(ValueError, match=rf"source 'checkpoint:{tmp_path}'{DIRECTORY_MESSAGE}"):
        resolve_source(f"checkpoint:{tmp_path}", parameter="model.embed.weight")
    with pytest.raises(ValueError, match=r"from_checkpoint='.*missing.ckpt': no such file"):
        VocabularyExtensionCallback(from_checkpoint=str(tmp_path / "missing.ckpt"))


def test_a_directory_is_no_checkpoint_for_embinit_ckpt_path(tmp_path, capsys):
    status = cli.main(["fit", "--config", str(CONFIG), *SMALL, f"--ckpt_path={tmp_path}"])
    assert status == 2
    assert f"--ckpt_path {tmp_path}{DIRECTORY_MESSAGE.replace(chr(92), '')}" in capsys.readouterr().err
