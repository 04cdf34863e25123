"""Decoder-only families built from their own code: litgpt's ``GPT`` (``transformer.wte``, rotary, input scale √d
when ``config.scale_embeddings``), torchtune's ``TransformerDecoder`` (``tok_embeddings``, a ``TiedLinear`` or untied
``output``, rotary, √d for Gemma) and nanoGPT (``transformer.wte`` with the learned ``transformer.wpe`` added
unscaled, ``lm_head`` tied). Each claim is checked by the probe of the model's own forward (:func:`~.settle.probed`).
"""

from __future__ import annotations

import math
from typing import Any

from torch import nn

from lightning_embinit.init.families.base import FAMILIES, Family, TokenTable, learned_rows
from lightning_embinit.init.families.settle import Claim, probed

ROTARY = "none: rotary embeddings in attention"


def _is_litgpt(module: nn.Module) -> bool:
    return type(module).__name__ == "GPT" and type(module).__module__.startswith("litgpt.")


def _wte_tables(model: nn.Module, claim: Claim, length: int, **described: Any) -> list[TokenTable]:
    """The ``transformer.wte`` table of a GPT with an ``lm_head``, tied to it or not."""
    table = model.transformer.wte
    tied = model.lm_head.weight is table.weight
    return [
        TokenTable(
            path="transformer.wte",
            output_layers=() if tied else ("lm_head",),
            vocabulary_biases=("lm_head.bias",) if tied and model.lm_head.bias is not None else (),
            **_settled(model, table, claim, length),
            **described,
        )
    ]


def _settled(model: nn.Module, table: nn.Embedding, claim: Claim, length: int) -> dict[str, Any]:
    """The table's scale and positions as TokenTable fields: the claim, checked by the probe of ``model(ids)``."""
    settled = probed(model, table, claim, lambda ids, _: model(ids), length)
    return {
        "input_scale": settled.input_scale,
        "positions": settled.positions,
        "positional_rows": settled.positional_rows,
        "input_scale_found_by": settled.input_scale_found_by,
        "positions_found_by": settled.positions_found_by,
    }


def _litgpt_tables(model: nn.Module) -> list[TokenTable]:
    scaled = getattr(model.config, "scale_embeddings", False)
    width = model.transformer.wte.embedding_dim
    claim = Claim(
        math.sqrt(width) if scaled else 1.0,
        "config.scale_embeddings (√d)" if scaled else "no scale flag (1)",
        ROTARY,
        None,
        ROTARY,
    )
    follow = lambda size, _sources=None: _set_litgpt_size(model, size)  # noqa: E731
    return _wte_tables(model, claim, model.config.block_size, after_resize=follow)


def _set_litgpt_size(model: nn.Module, size: int) -> None:
    model.config.vocab_size = model.config.padded_vocab_size = size


def _is_torchtune(module: nn.Module) -> bool:
    return type(module).__module__.startswith("torchtune.") and isinstance(
        getattr(module, "tok_embeddings", None), nn.Embedding
    )


def _torchtune_tables(model: nn.Module) -> list[TokenTable]:
    table, output = model.tok_embeddings, model.output
    tied = getattr(output, "tied_module", None) is table
    scaled = "Gemma" in type(model).__name__
    claim = Claim(
        math.sqrt(table.embedding_dim) if scaled else 1.0,
        "Gemma (√d)" if scaled else "no scale flag (1)",
        ROTARY,
        None,
        ROTARY,
    )
    return [
        TokenTable(
            path="tok_embeddings",
            tied=("output",) if tied else (),
            output_layers=() if tied or not isinstance(output, nn.Linear) else ("output",),
            **_settled(model, table, claim, getattr(model, "max_seq_len", None) or 512),
        )
    ]


def _is_nanogpt(module: nn.Module) -> bool:
    transformer = getattr(module, "transformer", None)
    return (
        not type(module).__module__.startswith(("transformers.", "litgpt."))
        and isinstance(transformer, nn.ModuleDict)
        and isinstance(transformer["wte"] if "wte" in transformer else None, nn.Embedding)
        and isinstance(transformer["wpe"] if "wpe" in transformer else None, nn.Embedding)
        and isinstance(getattr(module, "lm_head", None), nn.Linear)
    )


def _nanogpt_tables(model: nn.Module) -> list[TokenTable]:
    positions = model.transformer.wpe
    claim = Claim(1.0, "nanoGPT adds unscaled rows (1)", "learned table transformer.wpe", learned_rows(positions))
    return _wte_tables(model, claim, positions.num_embeddings)


@FAMILIES.register("litgpt", summary="litgpt GPT (litgpt.model.GPT built from a litgpt Config)")
def litgpt() -> Family:
    return Family("litgpt", _is_litgpt, _litgpt_tables, lambda model: f"litgpt GPT ({model.config.name or 'custom'})")


@FAMILIES.register("torchtune", summary="torchtune TransformerDecoder (tok_embeddings, TiedLinear or Linear output)")
def torchtune() -> Family:
    return Family("torchtune", _is_torchtune, _torchtune_tables, lambda model: f"torchtune {type(model).__name__}")


@FAMILIES.register("nanogpt", summary="nanoGPT-style GPT (transformer.wte, transformer.wpe, lm_head)")
def nanogpt() -> Family:
    return Family("nanogpt", _is_nanogpt, _nanogpt_tables, lambda model: f"nanoGPT-style {type(model).__name__}")
