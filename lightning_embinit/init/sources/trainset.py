"""``word2vec-trainset``: word2vec trained with gensim on the task's own training text (Kocmi and Bojar, "An
Exploration of Word Embedding Initialization in Deep-Learning Tasks" [KB]; docs/concepts.md#trainset-word2vec).

The corpus is ``request.corpus()``, read once per gensim pass; the vectors then go through the usual alignment. With
``workers=1`` (the default) training is deterministic (docs/sources.md, "word2vec on the training text").
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from lightning_embinit.init.sources.base import SOURCES, SourceRequest, VectorSet
from lightning_embinit.init.sources.pretrained import ArrayVectorSet, PretrainedSource, split_options

WORD2VEC_DEFAULTS: dict[str, Any] = {
    "vector_size": None,  # the slot's embedding_dim
    "window": 5,
    "min_count": 1,  # the slot's vocabulary already applied its own minimum frequency
    "epochs": 5,
    "sg": 0,
    "hs": 0,
    "negative": 5,
    "sample": 1e-3,
    "alpha": 0.025,
    "min_alpha": 0.0001,
    "seed": None,  # drawn from the request's generator
    "workers": 1,
}


def stable_hash(text: str) -> int:
    """A process-independent string hash for gensim's ``hashfxn``."""
    return zlib.crc32(text.encode("utf-8"))


@dataclass
class _Restartable:
    """An iterable that calls ``corpus()`` afresh for every gensim pass."""

    corpus: Callable[[], Iterable[Sequence[str]]]

    def __iter__(self) -> Iterator[list[str]]:
        return (list(sentence) for sentence in self.corpus())


def train_word2vec(request: SourceRequest, options: dict[str, Any]) -> VectorSet:
    """Train gensim ``Word2Vec`` on the slot's corpus; the table holds its vocabulary and vectors."""
    from gensim.models import Word2Vec

    if request.corpus is None:
        raise ValueError(
            f"source 'word2vec-trainset' needs the training text of slot {request.slot_name!r}, but none was given: "
            "the datamodule must provide training_corpus(slot_name) returning tokenized sentences"
        )
    params = {**WORD2VEC_DEFAULTS, **options}
    if params["vector_size"] is None:
        params["vector_size"] = request.embedding_dim
    if params["seed"] is None:
        params["seed"] = int(torch.randint(0, 2**31 - 1, (1,), generator=request.generator).item())
    for key in ("vector_size", "window", "min_count", "epochs", "workers"):
        if int(params[key]) < 1:
            raise ValueError(f"word2vec-trainset: {key} must be ≥ 1, got {params[key]!r}")
    sentences = _Restartable(request.corpus)
    model = Word2Vec(sentences=sentences, hashfxn=stable_hash, **{k: params[k] for k in WORD2VEC_DEFAULTS})
    if len(model.wv) == 0:
        raise ValueError(
            f"word2vec-trainset: no word of slot {request.slot_name!r}'s corpus reached min_count={params['min_count']}"
        )
    settings = ", ".join(f"{k}={params[k]}" for k in ("vector_size", "window", "min_count", "epochs", "sg", "seed"))
    return ArrayVectorSet(
        tokens=list(model.wv.index_to_key),
        matrix=model.wv.vectors,
        description=f"gensim Word2Vec on the training text ({len(model.wv)}×{model.wv.vector_size}; {settings})",
    )


@SOURCES.register("word2vec-trainset", summary="word2vec trained with gensim on the slot's training text [KB]")
def word2vec_trainset(**options: Any) -> PretrainedSource:
    alignment, own = split_options("word2vec-trainset", options, tuple(WORD2VEC_DEFAULTS))
    for key, value in own.items():
        if value is not None and not isinstance(value, (int, float)):
            raise ValueError(f"word2vec-trainset: option {key} must be a number, got {value!r}")
    return PretrainedSource("word2vec-trainset", partial(train_word2vec, options=own), alignment)
