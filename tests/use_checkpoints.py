"""Tiny trained checkpoints of every system the use commands and ``embinit predict`` serve, made once per test
process (``test_use_cli.py`` and ``test_predict_command.py`` share them)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch

from lightning_embinit.data import ClassificationDataModule, LanguageModelDataModule
from lightning_embinit.models import (
    HuggingFaceLM,
    ReinforcedTransformerSeq2Seq,
    TiedEmbeddingLM,
    TransformerClassifier,
    TransformerSeq2Seq,
)
from tests.shared_data import require_shared_data
from tests.translation_helpers import TINY, TINY_REINFORCED, multi30k_data, tokenizer_configs, trainer

WORDS = "The cat sat on the mat . A dog ran to the Park and the cat ran too .".split()
CLASSIFIER = {"architecture": {"d_model": 32, "num_heads": 4, "num_layers": 1, "ffn_dim": 64, "max_len": 64}}
GPT2 = {"n_embd": 32, "n_layer": 1, "n_head": 2, "n_positions": 16}
_MADE: dict[str, dict] = {}


def fit_and_save(model, data, path: Path) -> str:
    torch.manual_seed(0)
    run = trainer(path.parent, max_steps=2, limit_val_batches=0)
    run.fit(model, datamodule=data)
    run.save_checkpoint(path)
    return str(path)


def lm_text(directory: Path) -> Path:
    """The tiny LM's training text: every rotation of :data:`WORDS`."""
    text = directory / "train.txt"
    text.write_text("\n".join(" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))) + "\n")
    return text


def use_checkpoints(tmp_path_factory) -> dict:
    """name → (checkpoint path, the trained model in memory: the reference), for seq2seq, reinforced, lm and
    classifier."""
    if "use" in _MADE:
        return _MADE["use"]
    directory = tmp_path_factory.mktemp("use_cli")
    made = {}
    translation = multi30k_data(examples=16)
    for name, cls, options in (
        ("seq2seq", TransformerSeq2Seq, TINY),
        ("reinforced", ReinforcedTransformerSeq2Seq, TINY_REINFORCED),
    ):
        L.seed_everything(0)
        model = cls(**tokenizer_configs(translation), **options)
        made[name] = (fit_and_save(model, translation, directory / f"{name}.ckpt"), model.eval())
    lm_data = LanguageModelDataModule(
        train_files=str(lm_text(directory)), seq_len=8, batch_size=4, min_freq=1, lowercase=False
    )
    lm_data.prepare_data()
    lm_data.setup("fit")
    L.seed_everything(0)
    lm = TiedEmbeddingLM(
        vocabulary=lm_data.vocabulary, architecture={"d_model": 32, "num_heads": 4, "num_layers": 1, "max_len": 8}
    )
    made["lm"] = (fit_and_save(lm, lm_data, directory / "lm.ckpt"), lm.eval())
    sst2 = ClassificationDataModule(
        dataset="sst2", data_dir=str(require_shared_data("sst2")), max_examples=16, min_freq=1, batch_size=8, seed=0
    )
    sst2.prepare_data()
    sst2.setup("fit")
    L.seed_everything(0)
    classifier = TransformerClassifier(tokenizer=sst2.tokenizer_config, label_names=sst2.label_names, **CLASSIFIER)
    made["classifier"] = (fit_and_save(classifier, sst2, directory / "classifier.ckpt"), classifier.eval())
    _MADE["use"] = made
    return made


def gpt2_checkpoint(tmp_path_factory) -> tuple[str, HuggingFaceLM]:
    """A tiny GPT-2 HuggingFaceLM over MiniLM's tokenizer, trained 30 steps on a few captions: (path, model)."""
    if "gpt2" in _MADE:
        return _MADE["gpt2"]
    directory = tmp_path_factory.mktemp("use_cli_hf")
    text = directory / "train.txt"
    text.write_text("the cat sat on the mat .\na dog ran in the park .\n" * 20)
    data = LanguageModelDataModule(train_files=str(text), tokenizer="hf:minilm", seq_len=8, batch_size=4)
    L.seed_everything(0)
    model = HuggingFaceLM("gpt2", GPT2, tokenizer=data.tokenizer_config, optimizer={"lr": 1e-2})
    run = trainer(directory, max_steps=30, limit_val_batches=0)
    run.fit(model, datamodule=data)
    run.save_checkpoint(directory / "gpt2.ckpt")
    _MADE["gpt2"] = (str(directory / "gpt2.ckpt"), model.eval())
    return _MADE["gpt2"]
