"""Hugging Face ``PreTrainedModel``: the token table is ``get_input_embeddings()``; the rest comes from the model.

- Output: ``get_output_embeddings()``, tied when it shares the weight; its bias and BART's ``final_logits_bias``.
- Positions: a learned table beside the token table (``wpe``, ``position_embeddings``, ``embed_positions``) from its
  first real position on (row ``offset``, or ``padding_idx + 1`` for RoBERTa), plus BERT's token-type-0 row; none
  for rotary, ALiBi (BLOOM, MPT) and relative-bias (T5) models.
- Input scale: √d where the model scales (``embed_scale``, ``config.scale_embedding``, Gemma), else 1.
- Padding row: the table's ``padding_idx``, else ``config.pad_token_id``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import torch
from torch import nn

from lightning_embinit.init.families.base import FAMILIES, Family, TokenTable, learned_rows, module_path

POSITION_NAMES = ("wpe", "position_embeddings", "embed_positions")
TOKEN_TYPE_NAMES = ("token_type_embeddings",)
ALIBI_TYPES = ("bloom", "mpt", "falcon")
SCALED_TYPES = ("gemma", "gemma2", "gemma3")


def is_hugging_face(module: nn.Module) -> bool:
    if "transformers" not in sys.modules:  # no PreTrainedModel exists before transformers is imported
        return False
    from transformers import PreTrainedModel

    return isinstance(module, PreTrainedModel) and isinstance(module.get_input_embeddings(), nn.Embedding)


def _named(model: nn.Module, names: tuple[str, ...], skip: nn.Module) -> list[tuple[str, nn.Embedding]]:
    return [
        (path, module)
        for path, module in model.named_modules()
        if isinstance(module, nn.Embedding) and module is not skip and path.rpartition(".")[2] in names
    ]


def _positions(model: nn.Module, table: nn.Embedding) -> tuple[str, Callable[[], torch.Tensor] | None]:
    config = model.config
    positions = _named(model, POSITION_NAMES, table)
    if positions:
        path, learned = positions[0]
        offset = getattr(learned, "offset", 0)
        if not offset and learned.padding_idx is not None:
            offset = learned.padding_idx + 1  # RoBERTa numbers positions from padding_idx + 1
        types = _named(model, TOKEN_TYPE_NAMES, table)
        described = f"learned table {path}" + (f" from row {offset}" if offset else "")
        described += f" + token type 0 ({types[0][0]})" if types else ""
        return described, learned_rows(learned, offset, *(module for _, module in types[:1]))
    model_type = getattr(config, "model_type", "")
    if any(path.endswith("relative_attention_bias") for path, _ in model.named_modules()):
        return "none: relative position bias in attention", None
    if model_type in ALIBI_TYPES or getattr(config, "alibi", False):
        return "none: ALiBi bias in attention", None
    if getattr(config, "rope_theta", None) is not None or any("Rotary" in type(m).__name__ for m in model.modules()):
        return "none: rotary embeddings in attention", None
    return "none found", None


def _input_scale(model: nn.Module, table: nn.Embedding) -> float:
    config = model.config
    scale = getattr(table, "embed_scale", None)
    if isinstance(scale, (int, float, torch.Tensor)):
        return float(scale)
    if getattr(config, "scale_embedding", False) or getattr(config, "model_type", "") in SCALED_TYPES:
        return math.sqrt(table.embedding_dim)
    return 1.0


def token_tables(model: nn.Module) -> list[TokenTable]:
    table = model.get_input_embeddings()
    output = model.get_output_embeddings()
    tied = output is not None and getattr(output, "weight", None) is table.weight
    biases = []
    if tied and getattr(output, "bias", None) is not None:
        biases.append(f"{module_path(model, output)}.bias")
    if isinstance(getattr(model, "final_logits_bias", None), torch.Tensor):
        biases.append("final_logits_bias")
    positions, rows = _positions(model, table)
    padding = table.padding_idx if table.padding_idx is not None else getattr(model.config, "pad_token_id", None)
    return [
        TokenTable(
            path=module_path(model, table),
            input_scale=_input_scale(model, table),
            positions=positions,
            positional_rows=rows,
            padding_idx=padding if isinstance(padding, int) and 0 <= padding < table.num_embeddings else None,
            output_layers=() if output is None or tied else (module_path(model, output),),
            vocabulary_biases=tuple(biases),
            after_resize=lambda size: _set_vocab_size(model, size),
        )
    ]


def _set_vocab_size(model: nn.Module, size: int) -> None:
    """What ``resize_token_embeddings`` keeps in step: the (text) config's ``vocab_size`` and the model's own."""
    config = model.config
    text_config = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
    text_config.vocab_size = size
    if hasattr(model, "vocab_size"):
        model.vocab_size = size


@FAMILIES.register("hugging_face", summary="transformers PreTrainedModel (get_input_embeddings, its config)")
def hugging_face() -> Family:
    return Family(
        "hugging_face",
        is_hugging_face,
        token_tables,
        lambda model: f"{type(model).__name__} ({getattr(model.config, 'model_type', '?')})",
    )
