"""The other embedding spaces two methods read, each over the **new** vocabulary:

- the donor's (``omp``): the input table of a model that already speaks the new tokenizer — a Hugging Face model
  directory (``hf:<dir>``; only its embedding tensor is read), any pre-trained source of the package, a module, or a
  (N′, d) tensor by new id — rows aligned to the new tokens by string;
- the auxiliary static space (``focus``, Dobler & de Melo 2023): fastText (Bojanowski et al. 2017) trained with
  gensim on target-domain text tokenized by the new tokenizer, one token a "word"; or vectors the user gives.

A token the space lacks is absent (``present`` False) and left to the method's fallback.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from lightning_embinit.init.extension.tables import output_layers
from lightning_embinit.init.host import select_slots
from lightning_embinit.init.sources.base import SourceRequest, resolve_source
from lightning_embinit.init.sources.trainset import stable_hash

FASTTEXT_DEFAULTS: dict[str, Any] = {
    "vector_size": 100,
    "window": 5,
    "min_count": 1,
    "epochs": 3,
    "min_n": 3,
    "max_n": 6,
    "bucket": 200_000,
    "workers": 1,
}
"""gensim ``FastText`` settings of the auxiliary space (FOCUS trains 3 epochs); 200,000 n-gram buckets (gensim's
2,000,000 take 800 MB at 100 dimensions); ``workers=1`` is deterministic."""


@dataclass
class StaticSpace:
    """(N′, d) float32 rows by new id, ``present`` (N′,) where a row exists, and what the space is."""

    rows: torch.Tensor
    present: torch.Tensor
    description: str


def _aligned(tokens: Sequence[str], lookup: Mapping[str, int], gather: Any, description: str) -> StaticSpace:
    positions = [i for i, token in enumerate(tokens) if token in lookup]
    present = torch.zeros(len(tokens), dtype=torch.bool)
    present[positions] = True
    found = gather([lookup[tokens[i]] for i in positions]) if positions else torch.zeros(0, 1)
    rows = torch.zeros(len(tokens), found.shape[1], dtype=torch.float32)
    rows[positions] = found.to(torch.float32)
    return StaticSpace(rows, present, f"{description}: {len(positions)} of {len(tokens)} new tokens")


OUTPUT_TENSORS = ("lm_head.weight", "embed_out.weight", "output.weight", "cls.predictions.decoder.weight")
"""The names of an untied output layer's weight in a Hugging Face checkpoint, tried in order."""


def _source_space(spec: str, new_tokens: Sequence[str], role: str) -> StaticSpace:
    """The rows of a pre-trained source over the new tokens; for the ``output`` role, a Hugging Face directory's
    untied output layer when it has one (a tied model's output is its table)."""
    spec = f"hf:{spec}" if os.path.isdir(os.path.expanduser(spec)) else spec
    request = SourceRequest("donor", len(new_tokens), 1, tokens=list(new_tokens))
    if role == "output" and spec.startswith("hf:"):
        for name in OUTPUT_TENSORS:
            try:
                vectors = resolve_source(spec, tensor=name).open_vectors(request)
            except (ValueError, KeyError, RuntimeError, FileNotFoundError):
                continue
            return _aligned(new_tokens, vectors.lookup(), vectors.gather, f"donor {spec} ({name})")
    source = resolve_source(spec)
    opener = getattr(source, "open_vectors", None)
    if opener is None:
        raise ValueError(f"donor={spec!r} is a random scheme, not a model: give a model that speaks the new tokenizer")
    vectors = opener(request)
    return _aligned(new_tokens, vectors.lookup(), vectors.gather, f"donor {spec}")


def donor_space(
    donor: Any, new_tokens: Sequence[str], *, donor_tokens: Sequence[str] | None = None, role: str = "input"
) -> StaticSpace:
    """The donor's rows over the new tokens (module doc): its input table (``role="input"``), or its untied output
    layer (``"output"``; a tied donor's is its table). A source spec (``hf:<dir>``, or a directory); a module (its one
    token table and its family's output layer; ``donor_tokens`` or the slot's own name its rows, else they are the new
    tokens by id); or a tensor (rows by new id, both roles)."""
    if isinstance(donor, (str, os.PathLike)):
        return _source_space(os.fspath(donor), new_tokens, role)
    if isinstance(donor, nn.Module):
        slots = select_slots(donor, None)
        if len(slots) != 1:
            raise ValueError(
                f"donor= {type(donor).__name__} has {len(slots)} token tables ({', '.join(slots)}); give one"
            )
        slot = next(iter(slots.values()))
        donor_tokens = donor_tokens if donor_tokens is not None else slot.tokens
        layers = output_layers(donor, slot) if role == "output" else ()
        donor = donor.get_submodule(layers[0]).weight.detach() if layers else slot.weight.detach()
    if not isinstance(donor, torch.Tensor) or donor.dim() != 2:
        raise ValueError(
            f"donor= takes a model directory, a source spec, a module or a 2-D tensor; got {type(donor).__name__}"
        )
    if donor_tokens is None:
        if donor.shape[0] < len(new_tokens):
            raise ValueError(
                f"donor table has {donor.shape[0]} rows for the new tokenizer's {len(new_tokens)} tokens: it does not "
                "speak the new tokenizer (pass donor_tokens= to align it by string)"
            )
        donor_tokens = list(new_tokens)
    lookup = {token: row for row, token in reversed(list(enumerate(donor_tokens)))}
    return _aligned(new_tokens, lookup, lambda rows: donor[torch.tensor(rows)], f"donor table {tuple(donor.shape)}")


def train_auxiliary(sentences: Sequence[Sequence[str]], *, seed: int = 0, **options: Any) -> tuple[Any, str]:
    """gensim ``FastText`` on tokenized ``sentences`` (:data:`FASTTEXT_DEFAULTS`, overridden by ``options``): its
    ``wv`` and a description."""
    from gensim.models import FastText

    if unknown := sorted(set(options) - set(FASTTEXT_DEFAULTS)):
        raise ValueError(f"focus: unknown fastText option(s) {unknown}; options: {', '.join(FASTTEXT_DEFAULTS)}")
    params = {**FASTTEXT_DEFAULTS, **options}
    if not sentences:
        raise ValueError("focus: the target-domain texts are empty; give texts= (lines of the new domain's text)")
    model = FastText(sentences=[list(s) for s in sentences], seed=seed, hashfxn=stable_hash, **params)
    settings = ", ".join(f"{key}={params[key]}" for key in ("vector_size", "window", "epochs"))
    return model.wv, f"fastText on {len(sentences)} target-domain lines ({settings}, seed={seed})"


def auxiliary_space(
    new_tokens: Sequence[str],
    *,
    vectors: Any = None,
    sentences: Iterable[Sequence[str]] | None = None,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
) -> StaticSpace:
    """The auxiliary space over the new tokens: ``vectors`` given (gensim ``KeyedVectors``, a mapping token →
    vector), else fastText trained on ``sentences`` (token strings of the new tokenizer). Tokens the training text
    never holds are absent: FOCUS leaves such rare tokens to another start."""
    description = "auxiliary vectors"
    if vectors is None:
        vectors, description = train_auxiliary(list(sentences or ()), seed=seed, **dict(options or {}))
    if hasattr(vectors, "key_to_index") and hasattr(vectors, "vectors"):
        matrix = np.asarray(vectors.vectors, dtype=np.float32)
        lookup = dict(vectors.key_to_index)
    elif isinstance(vectors, Mapping):
        keys = list(vectors)
        matrix = np.stack([np.asarray(vectors[k], dtype=np.float32) for k in keys]) if keys else np.zeros((0, 1))
        lookup = {key: row for row, key in enumerate(keys)}
    else:
        raise ValueError(
            f"auxiliary= takes gensim KeyedVectors or a mapping token → vector; got {type(vectors).__name__}"
        )
    return _aligned(new_tokens, lookup, lambda rows: torch.from_numpy(matrix[np.asarray(rows)]), description)
