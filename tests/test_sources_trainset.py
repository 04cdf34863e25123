"""word2vec-trainset ([KB] "Word2Vec on trainset") on real Multi30k sentences."""

from __future__ import annotations

import gzip
from collections import Counter
from itertools import islice

import pytest
import torch

from lightning_embinit.init.sources import SourceRequest, resolve_source
from tests.shared_data import require_shared_data

SPECIALS = {"pad": "<pad>", "unk": "<unk>", "bos": "<bos>", "eos": "<eos>"}


@pytest.fixture(scope="module")
def multi30k():
    path = require_shared_data("multi30k", "train.en.gz")
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        sentences = [line.lower().split() for line in islice(handle, 4000)]
    counts = Counter(token for sentence in sentences for token in sentence)
    words = sorted((t for t, c in counts.items() if c >= 2), key=lambda t: (-counts[t], t))
    return sentences, list(SPECIALS.values()) + words


def request_for(tokens, sentences, dim=32, seed=0):
    return SourceRequest(
        "src",
        len(tokens),
        dim,
        tokens=tokens,
        special_tokens=SPECIALS,
        generator=torch.Generator().manual_seed(seed),
        corpus=lambda: iter(sentences),
    )


def test_word2vec_on_the_trainset_is_deterministic_and_covers_the_vocabulary(multi30k):
    sentences, tokens = multi30k
    source = resolve_source("word2vec-trainset", epochs=2, window=3)
    first = source.build(request_for(tokens, sentences, seed=1))
    again = source.build(request_for(tokens, sentences, seed=1))
    other = source.build(request_for(tokens, sentences, seed=2))
    assert torch.equal(first.weight, again.weight)
    assert not torch.equal(first.weight, other.weight)
    assert first.weight.shape == (len(tokens), 32)
    assert first.coverage.found == len(tokens) - 4 and first.coverage.missing[:4] == [
        "<pad>",
        "<unk>",
        "<bos>",
        "<eos>",
    ]
    assert first.pretrained_rows[4:].all() and not first.pretrained_rows[:4].any()
    assert "Word2Vec" in first.description and "seed=" in first.description


def test_word2vec_trainset_learns_something():
    path = require_shared_data("multi30k", "train.en.gz")
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        sentences = [line.lower().split() for line in handle]
    tokens = ["<pad>", "man", "woman", "water", "red", "blue", "running"]
    built = resolve_source("word2vec-trainset", epochs=5, seed=7).build(request_for(tokens, sentences, dim=48))
    index = {t: i for i, t in enumerate(tokens)}
    vectors = torch.nn.functional.normalize(built.weight, dim=1)

    def cosine(a, b):
        return float(vectors[index[a]] @ vectors[index[b]])

    assert cosine("man", "woman") > cosine("man", "water") + 0.2
    assert cosine("red", "blue") > cosine("red", "running") + 0.2


def test_explicit_seed_and_vector_size_with_projection(multi30k):
    sentences, tokens = multi30k
    small = tokens[:300]
    a = resolve_source("word2vec-trainset", epochs=1, seed=3, vector_size=16, project="random_orthogonal")
    b = resolve_source("word2vec-trainset", epochs=1, seed=3, vector_size=16, project="random_orthogonal")
    wa = a.build(request_for(small, sentences, seed=5)).weight
    assert wa.shape == (300, 32)
    assert torch.equal(wa, b.build(request_for(small, sentences, seed=5)).weight)
    with pytest.raises(ValueError, match="D_s=16 but slot 'src' has embedding_dim D=32"):
        resolve_source("word2vec-trainset", epochs=1, vector_size=16).build(request_for(small, sentences))


def test_trainset_needs_a_corpus_and_valid_options():
    request = SourceRequest("src", 2, 8, tokens=["a", "b"])
    with pytest.raises(ValueError, match="needs the training text of slot 'src'"):
        resolve_source("word2vec-trainset").build(request)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['size'\]"):
        resolve_source("word2vec-trainset", size=10)
    with pytest.raises(ValueError, match="must be a number"):
        resolve_source("word2vec-trainset", window="big")
