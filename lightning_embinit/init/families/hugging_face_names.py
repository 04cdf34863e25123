"""What a Hugging Face model's names and flags say about a token table (the :class:`~.settle.Claim` the probe checks,
and the answer where the probe cannot run).

- Input scale: the table's or its owner's ``embed_scale``; √d for ``config.scale_embedding``, Gemma (also
  RecurrentGemma, T5Gemma) and CTRL; ``config.embedding_multiplier`` (Granite, Granite MoE, Falcon-H1),
  ``config.scale_emb`` (MiniCPM), ``config.embedding_scale`` (HRM); else 1.
- Positions: a learned table beside the token table (``wpe``, ``position_embeddings``, ``embed_positions``) from its
  first real position on (row ``offset``, or ``padding_idx + 1`` for RoBERTa), plus BERT's token-type-0 row; none for
  relative-bias (T5), ALiBi (BLOOM, MPT, Falcon) and rotary models.
- A decoder's own table (Marian with ``share_encoder_decoder_embeddings=False``, FSMT): the decoder's input
  embeddings when their weight is not the encoder's.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from lightning_embinit.init.families.base import learned_rows, module_path
from lightning_embinit.init.families.settle import MEASURED_POSITIONS, Claim

POSITION_NAMES = ("wpe", "position_embeddings", "embed_positions")
TOKEN_TYPE_NAMES = ("token_type_embeddings",)
ALIBI_TYPES = ("bloom", "mpt", "falcon")
SQRT_D_TYPES = ("gemma", "gemma2", "gemma3", "gemma3_text", "recurrent_gemma", "t5gemma", "ctrl")
LENGTH_FIELDS = ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "max_target_positions")


def text_config(model: nn.Module) -> object:
    config = model.config
    return config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config


def _number(value: object) -> float | None:
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_meta:
        return float(value)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def scale_claim(model: nn.Module, table: nn.Embedding) -> tuple[float, str]:
    """(s, where it was read) from names and flags (module docstring)."""
    owner = model.get_submodule(module_path(model, table).rpartition(".")[0])
    for holder, words in ((table, "the table's embed_scale"), (owner, "embed_scale of the table's owner")):
        if (scale := _number(getattr(holder, "embed_scale", None))) is not None:
            return scale, words
    config = text_config(model)
    if getattr(config, "scale_embedding", False) is True:
        return math.sqrt(table.embedding_dim), "config.scale_embedding (√d)"
    for model_type in (getattr(config, "model_type", ""), getattr(model.config, "model_type", "")):
        if model_type in SQRT_D_TYPES:
            return math.sqrt(table.embedding_dim), f"model type {model_type} (√d)"
    for field in ("embedding_multiplier", "scale_emb", "embedding_scale"):
        if (scale := _number(getattr(config, field, None))) is not None:
            return scale, f"config.{field}"
    return 1.0, "no scale flag (1)"


def _named(scope: nn.Module, names: tuple[str, ...], skip: nn.Module) -> list[tuple[str, nn.Embedding]]:
    return [
        (path, module)
        for path, module in scope.named_modules()
        if isinstance(module, nn.Embedding) and module is not skip and path.rpartition(".")[2] in names
    ]


def position_claim(model: nn.Module, scope: nn.Module, table: nn.Embedding) -> tuple[str, Callable | None]:
    """(the added positions in words, their rows or None) from the learned tables named in ``scope``."""
    positions = _named(scope, POSITION_NAMES, table)
    if not positions:
        return nothing_added(model), None
    path, learned = positions[0]
    if learned.embedding_dim != table.embedding_dim:  # MobileBERT: added after the token vectors are projected
        width = learned.embedding_dim
        return f"none in the table's space (learned table {path} of width {width} is added after a projection)", None
    offset = getattr(learned, "offset", 0)
    if not offset and learned.padding_idx is not None:
        offset = learned.padding_idx + 1  # RoBERTa numbers positions from padding_idx + 1
    types = _named(scope, TOKEN_TYPE_NAMES, table)
    where = module_path(model, learned)
    described = f"learned table {where}" + (f" from row {offset}" if offset else "")
    described += f" + token type 0 ({module_path(model, types[0][1])})" if types else ""
    return described, learned_rows(learned, offset, *(module for _, module in types[:1]))


def nothing_added(model: nn.Module) -> str:
    """What the model does for positions instead of adding them, in words (or ``none found``)."""
    config = text_config(model)
    if any(path.endswith("relative_attention_bias") for path, _ in model.named_modules()):
        return "none: relative position bias in attention"
    if getattr(config, "model_type", "") in ALIBI_TYPES or getattr(config, "alibi", False) is True:
        return "none: ALiBi bias in attention"
    if getattr(config, "rope_theta", None) is not None or any("Rotary" in type(m).__name__ for m in model.modules()):
        return "none: rotary embeddings in attention"
    return "none found"


def claim(model: nn.Module, scope: nn.Module, table: nn.Embedding) -> Claim:
    """The names-and-flags claim for ``table``, its positions looked for in ``scope`` (the model, or its decoder)."""
    scale, scale_from = scale_claim(model, table)
    positions, rows = position_claim(model, scope, table)
    return Claim(scale, scale_from, positions, rows, nothing_added(model))


def positions_length(model: nn.Module) -> int:
    """How many positions to measure added rows over: the config's ``max_position_embeddings`` or kin (512 when none
    says), at most :data:`~lightning_embinit.init.families.settle.MEASURED_POSITIONS`."""
    config = text_config(model)
    for field in LENGTH_FIELDS:
        value = getattr(config, field, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return min(value, MEASURED_POSITIONS)
    return 512


def special_ids(model: nn.Module) -> set[int]:
    """The config's special token ids (padding, bos, eos, …): the probe leaves them out."""
    found: set[int] = set()
    for config in {id(model.config): model.config, id(text_config(model)): text_config(model)}.values():
        for key, value in config.to_dict().items():
            if isinstance(key, str) and "token_id" in key:
                values = value if isinstance(value, (list, tuple)) else [value]
                found |= {v for v in values if isinstance(v, int) and not isinstance(v, bool)}
    return found


def decoder_module(model: nn.Module) -> nn.Module | None:
    """An encoder–decoder's decoder (``get_decoder()``), or None."""
    if not getattr(model.config, "is_encoder_decoder", False) or not callable(getattr(model, "get_decoder", None)):
        return None
    try:
        decoder = model.get_decoder()
    except (AttributeError, NotImplementedError, ValueError):
        return None
    return decoder if isinstance(decoder, nn.Module) and decoder is not model else None


def decoder_table(model: nn.Module, primary: nn.Embedding) -> nn.Embedding | None:
    """The decoder's own token table by name (its input embeddings, when their weight is not ``primary``'s)."""
    decoder = decoder_module(model)
    if decoder is None:
        return None
    table = getattr(decoder, "embed_tokens", None)
    if not isinstance(table, nn.Embedding) and callable(getattr(decoder, "get_input_embeddings", None)):
        try:
            table = decoder.get_input_embeddings()
        except (AttributeError, NotImplementedError):
            table = None
    return table if isinstance(table, nn.Embedding) and table.weight is not primary.weight else None
