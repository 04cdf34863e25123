"""``TokenTransplantCallback``: the swap at ``setup`` of a fine-tune (a user's LightningModule holding a Hugging Face
model, and a model built over the new vocabulary from a trained checkpoint), the same tensors as
``transplant_tokenizer``, ``trainable="new_rows"`` keeping the matched rows bit for bit, the report published."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_embinit import TiedEmbeddingLM, TokenTransplantCallback, transplant_tokenizer
from tests.transplant_helpers import ENGLISH, GERMAN, byte_level, tiny_llama, vocabulary

ARCHITECTURE = {"d_model": 16, "num_heads": 2, "num_layers": 1, "head": "untied"}


@pytest.fixture(scope="module")
def tokenizers():
    return byte_level(ENGLISH), byte_level(GERMAN)


class YourLM(L.LightningModule):
    """What a user writes: the model under an attribute, its tokenizer beside it, its own loss."""

    def __init__(self, tokenizer, seed: int = 0) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.lm = tiny_llama(len(tokenizer), seed=seed).train()

    def training_step(self, batch, batch_idx):
        (ids,) = batch
        return self.lm(input_ids=ids, labels=ids).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2, weight_decay=0.1)


def german_batches(tokenizer) -> DataLoader:
    ids = tokenizer(GERMAN[:8], add_special_tokens=False, padding=False)["input_ids"]
    width = min(map(len, ids))
    return DataLoader(TensorDataset(torch.tensor([row[:width] for row in ids])), batch_size=4)


def trainer(tmp_path, callback, steps: int = 3) -> L.Trainer:
    return L.Trainer(
        default_root_dir=tmp_path,
        max_steps=steps,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def test_the_swap_at_setup_is_transplant_tokenizers(tokenizers, tmp_path, caplog):
    english, german = tokenizers
    model, reference = YourLM(english, seed=1), YourLM(english, seed=1)
    transplant_tokenizer(reference.lm, german, old_tokenizer=english, method="pieces")
    callback = TokenTransplantCallback(tokenizer=german, method="pieces")
    callback.setup(trainer(tmp_path, callback), model, "fit")
    for key, tensor in reference.lm.state_dict().items():
        assert torch.equal(model.lm.state_dict()[key], tensor), key
    assert model.tokenizer is german and callback.reports["lm.model.embed_tokens"]["built"] > 0


def test_new_rows_only_keeps_the_matched_rows_through_training(tokenizers, tmp_path):
    english, german = tokenizers
    model = YourLM(english, seed=2)
    callback = TokenTransplantCallback(tokenizer=german, method="pieces", trainable="new_rows", verbose=False)
    fit = trainer(tmp_path, callback)
    before = {}

    class Snapshot(L.Callback):
        def on_train_start(self, trainer, pl_module):
            before.update({k: v.detach().clone() for k, v in pl_module.lm.state_dict().items()})

    fit.callbacks.append(Snapshot())
    fit.fit(model, german_batches(german))
    after = model.lm.state_dict()
    built = callback.added["lm.model.embed_tokens"]
    for key in ("model.embed_tokens.weight", "lm_head.weight"):
        assert torch.equal(after[key][~built], before[key][~built]), key  # AdamW's decay pinned away
        assert not torch.equal(after[key][built], before[key][built]), key
    assert torch.equal(after["model.norm.weight"], before["model.norm.weight"])  # everything else frozen


def trained_checkpoint(english, tmp_path) -> Path:
    """``<tmp_path>/trained.ckpt``: a TiedEmbeddingLM over ``english``'s vocabulary, seeded, as Lightning saves it."""
    torch.manual_seed(0)
    trained = TiedEmbeddingLM(vocabulary=vocabulary(english), architecture=ARCHITECTURE)
    fit = trainer(tmp_path, L.Callback())
    fit.strategy.connect(trained)
    fit.save_checkpoint(tmp_path / "trained.ckpt")
    return tmp_path / "trained.ckpt"


def test_from_a_checkpoint_into_a_model_built_over_the_new_vocabulary(tokenizers, tmp_path):
    english, german = tokenizers
    trained_checkpoint(english, tmp_path)
    expected = TiedEmbeddingLM.load_from_checkpoint(tmp_path / "trained.ckpt")
    transplant_tokenizer(expected, german, old_tokenizer=english, method="pieces")
    fresh = TiedEmbeddingLM(vocabulary=vocabulary(german), architecture=ARCHITECTURE)
    callback = TokenTransplantCallback(
        tokenizer=german, old_tokenizer=english, from_checkpoint=str(tmp_path / "trained.ckpt")
    )
    callback.setup(trainer(tmp_path, callback), fresh, "fit")
    for key, tensor in expected.state_dict().items():
        assert torch.equal(fresh.state_dict()[key], tensor), key
    over_the_old = TiedEmbeddingLM(vocabulary=vocabulary(english), architecture=ARCHITECTURE)  # loaded, then swapped
    callback = TokenTransplantCallback(
        tokenizer=german, old_tokenizer=english, from_checkpoint=str(tmp_path / "trained.ckpt")
    )
    callback.setup(trainer(tmp_path, callback), over_the_old, "fit")
    for key, tensor in expected.state_dict().items():
        assert torch.equal(over_the_old.state_dict()[key], tensor), key
    assert over_the_old.vocabulary == vocabulary(german)


def test_new_rows_with_every_token_matched_is_refused_before_the_swap(tokenizers, tmp_path):
    english, _ = tokenizers
    model = YourLM(english, seed=3)
    before = {k: v.clone() for k, v in model.lm.state_dict().items()}
    subset = vocabulary(english)[:60]  # every token an old one: nothing to build
    callback = TokenTransplantCallback(tokenizer=subset, trainable="new_rows", verbose=False)
    with pytest.raises(ValueError, match="trainable=.new_rows. trains only the"):
        callback.setup(trainer(tmp_path, callback), model, "fit")
    assert all(torch.equal(model.lm.state_dict()[k], v) for k, v in before.items()) and model.tokenizer is english


class Watched(TiedEmbeddingLM):
    """A system that records seeing the checkpoint, as Lightning's restore shows it (``on_load_checkpoint``)."""

    seen: list = []

    def on_load_checkpoint(self, checkpoint):
        Watched.seen.append(sorted(checkpoint))


def test_the_system_sees_the_checkpoint_and_the_fine_tunes_checkpoint_records_the_new_vocabulary(tokenizers, tmp_path):
    english, german = tokenizers
    trained_checkpoint(english, tmp_path)
    fresh = Watched(vocabulary=vocabulary(german), architecture=ARCHITECTURE)
    callback = TokenTransplantCallback(tokenizer=german, from_checkpoint=str(tmp_path / "trained.ckpt"), method="mean")
    Watched.seen.clear()
    callback.setup(trainer(tmp_path, callback), fresh, "fit")  # the old vocabulary: the checkpoint's hyperparameters
    assert len(Watched.seen) == 1 and "state_dict" in Watched.seen[0]
    checkpoint = {}
    callback.on_save_checkpoint(None, fresh, checkpoint)
    assert checkpoint["embinit"]["slots"]["tokens"]["tokens"] == vocabulary(german)


def test_a_model_built_over_neither_vocabulary_is_refused_before_loading(tokenizers, tmp_path):
    english, german = tokenizers
    trained_checkpoint(english, tmp_path)
    other = TiedEmbeddingLM(vocabulary=vocabulary(english)[:50], architecture=ARCHITECTURE)
    before = {k: v.clone() for k, v in other.state_dict().items()}
    callback = TokenTransplantCallback(
        tokenizer=german, old_tokenizer=english, from_checkpoint=str(tmp_path / "trained.ckpt"), method="mean"
    )
    with pytest.raises(ValueError, match=r"the model's table has 50 rows, the checkpoint's \d+ .*nothing was changed"):
        callback.setup(trainer(tmp_path, callback), other, "fit")
    assert all(torch.equal(other.state_dict()[k], v) for k, v in before.items())


def test_refused_at_construction():
    with pytest.raises(ValueError, match="unknown transplant method"):
        TokenTransplantCallback(method="fvt")
    with pytest.raises(ValueError, match="trainable="):
        TokenTransplantCallback(trainable="old_rows")
    with pytest.raises(ValueError, match="no such file"):
        TokenTransplantCallback(from_checkpoint="/nowhere/model.ckpt")
