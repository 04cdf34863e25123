"""VocabularyExtensionCallback (issue 18): fine-tune a trained LM on text with new words, resume, and DDP."""

from __future__ import annotations

import json

import pytest
import torch
from lightning.pytorch import Callback, Trainer

from lightning_embinit import LanguageModelDataModule, TiedEmbeddingLM, VocabularyExtensionCallback
from tests.host_models import VOCAB, TwoSlotHost, make_trainer, token_loader
from tests.two_processes import ddp_strategy

OLD_TEXT = "the cat sat on the mat .\nthe dog ran far .\n" * 30
NEW_TEXT = "the cat saw a bird .\nthe dog saw a bird on the mat .\n" * 30
SIZES = {"architecture": {"d_model": 16, "num_heads": 2, "num_layers": 1, "head": "untied", "head_bias": True}}


def trainer(tmp_path, callbacks=(), max_steps=3, **options) -> Trainer:
    settings = dict(
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=tmp_path,
        enable_checkpointing=False,
        max_steps=max_steps,
        callbacks=list(callbacks),
    )
    return Trainer(**{**settings, **options})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A word-level LM trained briefly on one text, its checkpoint, and a datamodule over a text with new words."""
    directory = tmp_path_factory.mktemp("extension")
    (directory / "old.txt").write_text(OLD_TEXT)
    (directory / "new.txt").write_text(NEW_TEXT)
    old_data = LanguageModelDataModule(
        train_files=str(directory / "old.txt"), val_files=str(directory / "old.txt"), seq_len=8, batch_size=4
    )
    torch.manual_seed(0)
    model = TiedEmbeddingLM(vocabulary=old_data.vocabulary, **SIZES)
    run = trainer(directory, max_steps=3)
    run.fit(model, old_data)
    run.save_checkpoint(directory / "old.ckpt")
    return directory, model


def new_data(directory) -> LanguageModelDataModule:
    return LanguageModelDataModule(
        train_files=str(directory / "new.txt"),
        val_files=str(directory / "new.txt"),
        seq_len=8,
        batch_size=4,
        base_vocabulary=str(directory / "old.ckpt"),
    )


def test_base_vocabulary_keeps_the_old_ids_and_a_given_vocabulary_wins(trained):
    directory, old = trained
    data = new_data(directory)
    assert data.vocabulary == old.vocabulary + ["a", "bird", "saw"]  # new words by frequency, then by string
    given = LanguageModelDataModule(
        train_files=str(directory / "new.txt"),
        val_files=str(directory / "new.txt"),
        vocabulary=old.vocabulary,
        base_vocabulary=str(directory / "old.ckpt"),
    )
    assert given.vocabulary == old.vocabulary  # `embinit fit --ckpt_path` hands a resumed fine-tune its own


def test_a_fine_tune_from_a_checkpoint_trains_only_the_new_rows(trained, tmp_path):
    directory, old = trained
    data = new_data(directory)
    model = TiedEmbeddingLM(
        vocabulary=data.vocabulary, **SIZES, optimizer={"weight_decay": 0.1}
    )  # as `embinit fit` builds it
    callback = VocabularyExtensionCallback(
        from_checkpoint=str(directory / "old.ckpt"), rule="mean", trainable="new_rows", verbose=False
    )
    run = trainer(tmp_path, [callback], max_steps=4)
    run.fit(model, data)
    n, new = len(old.vocabulary), model.state_dict()
    for name, tensor in old.state_dict().items():
        if tensor.shape == new[name].shape:
            assert torch.equal(new[name], tensor), name  # every other weight is the checkpoint's, untouched
        else:
            assert torch.equal(new[name][:n], tensor), name  # old rows, bias entries included
            assert not torch.allclose(new[name][n:], tensor.double().mean(dim=0).float().expand_as(new[name][n:])), name
    report = callback.reports["tokens"]
    assert report["added_rows"] == 3 and 0 < report["new_token_mass"] < report["uniform_mass"]
    run.save_checkpoint(tmp_path / "fine.ckpt")
    assert TiedEmbeddingLM.load_from_checkpoint(tmp_path / "fine.ckpt").model.head.proj.out_features == n + 3


def test_a_resumed_fine_tune_keeps_its_tables_and_an_old_checkpoint_as_ckpt_path_is_refused(
    trained, tmp_path, monkeypatch
):
    directory, old = trained
    data = new_data(directory)
    first = VocabularyExtensionCallback(
        from_checkpoint=str(directory / "old.ckpt"), trainable="new_rows", verbose=False
    )
    run = trainer(tmp_path, [first], max_steps=2)
    model = TiedEmbeddingLM(vocabulary=data.vocabulary, **SIZES, optimizer={"weight_decay": 0.1})
    run.fit(model, data)
    run.save_checkpoint(tmp_path / "fine.ckpt")
    resumed = VocabularyExtensionCallback(
        from_checkpoint=str(directory / "old.ckpt"), trainable="new_rows", verbose=False
    )
    again = TiedEmbeddingLM(vocabulary=data.vocabulary, **SIZES, optimizer={"weight_decay": 0.1})
    trainer(tmp_path, [resumed], max_steps=4).fit(again, data, ckpt_path=tmp_path / "fine.ckpt")
    assert resumed.resumed and torch.equal(resumed.added["tokens"], first.added["tokens"])
    n = len(old.vocabulary)
    assert torch.equal(again.model.token_embedding.weight[:n], old.model.token_embedding.weight)
    with monkeypatch.context() as patch:  # a Lightning that restored without telling the callbacks: fail, never train
        patch.setattr("lightning.pytorch.trainer.call._call_callbacks_on_load_checkpoint", lambda *args: None)
        with pytest.raises(RuntimeError, match=r"restored .*fine\.ckpt, but it called on_load_checkpoint at no time"):
            trainer(tmp_path, [VocabularyExtensionCallback(verbose=False)], max_steps=4).fit(
                TiedEmbeddingLM(vocabulary=data.vocabulary, **SIZES), data, ckpt_path=tmp_path / "fine.ckpt"
            )
    with (
        pytest.raises(RuntimeError, match="size mismatch"),  # Lightning's strict restore; the callback says why
        pytest.warns(UserWarning, match=r"resumes a run, with its own shapes.*from_checkpoint"),
    ):
        trainer(tmp_path, [VocabularyExtensionCallback(verbose=False)]).fit(
            TiedEmbeddingLM(vocabulary=data.vocabulary, **SIZES), data, ckpt_path=directory / "old.ckpt"
        )


def test_without_a_checkpoint_the_models_own_weights_are_extended_in_place(trained, tmp_path):
    directory, old = trained
    data = new_data(directory)
    model = TiedEmbeddingLM.load_from_checkpoint(directory / "old.ckpt")
    callback = VocabularyExtensionCallback(rule="mean_cov", verbose=False)
    trainer(tmp_path, [callback], max_steps=1, limit_train_batches=1).fit(model, data)
    assert model.vocabulary == data.vocabulary and model.hparams.vocab_size == len(data.vocabulary)
    assert model.model.head.proj.out_features == len(data.vocabulary)


def test_a_translation_fine_tune_takes_the_old_vocabulary_from_the_checkpoints_tokenizer(tmp_path):
    from torch.utils.data import DataLoader

    from lightning_embinit import TransformerSeq2Seq
    from lightning_embinit.text.tokenization import TextTokenizer

    texts = ["a man rides a horse", "a woman reads a book", "two dogs run"] * 3
    src, old_tgt = TextTokenizer.word(texts, min_freq=1), TextTokenizer.word(texts, min_freq=1)
    sizes = {"architecture": dict(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, head="untied")}
    old = TransformerSeq2Seq(src_tokenizer=src.to_config(), tgt_tokenizer=old_tgt.to_config(), **sizes)
    saver = trainer(tmp_path)
    saver.strategy.connect(old)
    saver.save_checkpoint(tmp_path / "old.ckpt")
    new_tgt = TextTokenizer.from_config({**old_tgt.to_config(), "tokens": ["skateboard", *old_tgt.tokens[::-1]]})
    model = TransformerSeq2Seq(src_tokenizer=src.to_config(), tgt_tokenizer=new_tgt.to_config(), **sizes)
    batch = {"src": torch.tensor([[4, 5, 3]]), "tgt": torch.tensor([[new_tgt.bos_id, 0, new_tgt.eos_id]])}
    callback = VocabularyExtensionCallback(
        from_checkpoint=str(tmp_path / "old.ckpt"), rule="mean", trainable="new_rows", verbose=False
    )
    trainer(tmp_path, [callback], max_steps=1).fit(model, DataLoader([batch], batch_size=None))
    assert callback.reports["tgt"]["added_tokens"] == ["skateboard"] and callback.reports["src"]["added_rows"] == 0
    state = torch.load(tmp_path / "old.ckpt", weights_only=False)["state_dict"]
    moved = [new_tgt.tokens.index(token) for token in old_tgt.tokens]  # the old ids, reversed and shifted by one
    for key in ("model.head.proj.weight", "model.head.proj.bias", "model.tgt_input.embedding.weight"):
        assert torch.equal(model.state_dict()[key][moved], state[key]), key
    assert torch.equal(model.model.src_input.embedding.weight, state["model.src_input.embedding.weight"])
    assert model.model.tgt_vocab.pad_id == new_tgt.pad_id == model.model.pad_id


def test_new_rows_with_nothing_new_is_refused_before_the_model_changes(trained, tmp_path):
    """A vocabulary that only drops tokens adds no row to train: refused before the table shrinks."""
    directory, old = trained
    model = TiedEmbeddingLM.load_from_checkpoint(directory / "old.ckpt")
    table = model.model.token_embedding.weight.detach().clone()
    callback = VocabularyExtensionCallback(
        tokens=old.vocabulary[:-2], allow_dropping=True, trainable="new_rows", verbose=False
    )
    with pytest.raises(ValueError, match="the new vocabulary adds none: nothing would train"):
        callback.setup(trainer(tmp_path, [callback]), model, "fit")
    assert torch.equal(model.model.token_embedding.weight, table) and model.vocabulary == old.vocabulary


def test_bad_options_fail_at_construction(tmp_path):
    with pytest.raises(ValueError, match="unknown trainable="):
        VocabularyExtensionCallback(trainable="pretrained_rows")
    with pytest.raises(ValueError, match="unknown extension rule 'bogus'"):
        VocabularyExtensionCallback(rule="bogus")
    with pytest.raises(ValueError, match="bias= takes a number or one of: mean, min, zero"):
        VocabularyExtensionCallback(bias="max")
    with pytest.raises(ValueError, match="no such file"):
        VocabularyExtensionCallback(from_checkpoint=str(tmp_path / "missing.ckpt"))


class WriteTables(Callback):
    """Runs its setup right after the extension's, before DDP would broadcast rank 0's weights."""

    def __init__(self, directory):
        self.directory = directory

    def setup(self, trainer, pl_module, stage):
        weight = pl_module.decoder_embedding.weight.detach().double()
        record = {
            "rows": weight.shape[0],
            "sum": float(weight.sum()),
            "abs": float(weight.abs().sum()),
            "new": weight[-2:].tolist(),
        }
        (self.directory / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


@pytest.mark.ddp
@pytest.mark.timeout(300)
def test_every_rank_holds_identical_extended_tables(tmp_path):
    old = TwoSlotHost()
    saver = make_trainer(tmp_path, [])
    saver.strategy.connect(old)
    saver.save_checkpoint(tmp_path / "old.ckpt")
    callback = VocabularyExtensionCallback(
        from_checkpoint=str(tmp_path / "old.ckpt"), old_tokens=VOCAB, rule="mean_cov:1", seed=None, verbose=False
    )
    make_trainer(tmp_path, [callback, WriteTables(tmp_path)], devices=2, strategy=ddp_strategy()).fit(
        TwoSlotHost(vocab_size=len(VOCAB) + 2, lr=0.0), token_loader(batches=4)
    )
    rank0 = json.loads((tmp_path / "rank0.json").read_text())
    rank1 = json.loads((tmp_path / "rank1.json").read_text())
    assert rank0 == rank1 and rank0["rows"] == len(VOCAB) + 2  # seed=None: drawn on rank 0, its rows broadcast
