"""Decoder-only families built from their own code: litgpt's ``GPT`` (``transformer.wte``, rotary, input scale √d
when ``config.scale_embeddings``), torchtune's ``TransformerDecoder`` (``tok_embeddings``, a ``TiedLinear`` or untied
``output``, rotary, √d for Gemma) and nanoGPT (``transformer.wte`` with the learned ``transformer.wpe`` added
unscaled, ``lm_head`` tied).
"""

from __future__ import annotations

import math
from typing import Any

from torch import nn

from lightning_embinit.init.families.base import FAMILIES, Family, TokenTable, learned_rows


def _is_litgpt(module: nn.Module) -> bool:
    return type(module).__name__ == "GPT" and type(module).__module__.startswith("litgpt.")


def _wte_tables(model: nn.Module, **described: Any) -> list[TokenTable]:
    """The ``transformer.wte`` table of a GPT with an ``lm_head``, tied to it or not."""
    tied = model.lm_head.weight is model.transformer.wte.weight
    return [
        TokenTable(
            path="transformer.wte",
            output_layers=() if tied else ("lm_head",),
            vocabulary_biases=("lm_head.bias",) if tied and model.lm_head.bias is not None else (),
            **described,
        )
    ]


def _litgpt_tables(model: nn.Module) -> list[TokenTable]:
    scaled = getattr(model.config, "scale_embeddings", False)
    return _wte_tables(
        model,
        input_scale=math.sqrt(model.transformer.wte.embedding_dim) if scaled else 1.0,
        positions="none: rotary embeddings in attention",
        after_resize=lambda size: _set_litgpt_size(model, size),
    )


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
    return [
        TokenTable(
            path="tok_embeddings",
            input_scale=math.sqrt(table.embedding_dim) if scaled else 1.0,
            positions="none: rotary embeddings in attention",
            tied=("output",) if tied else (),
            output_layers=() if tied or not isinstance(output, nn.Linear) else ("output",),
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
    positional_rows = learned_rows(model.transformer.wpe)
    return _wte_tables(
        model, input_scale=1.0, positions="learned table transformer.wpe", positional_rows=positional_rows
    )


@FAMILIES.register("litgpt", summary="litgpt GPT (litgpt.model.GPT built from a litgpt Config)")
def litgpt() -> Family:
    return Family("litgpt", _is_litgpt, _litgpt_tables, lambda model: f"litgpt GPT ({model.config.name or 'custom'})")


@FAMILIES.register("torchtune", summary="torchtune TransformerDecoder (tok_embeddings, TiedLinear or Linear output)")
def torchtune() -> Family:
    return Family("torchtune", _is_torchtune, _torchtune_tables, lambda model: f"torchtune {type(model).__name__}")


@FAMILIES.register("nanogpt", summary="nanoGPT-style GPT (transformer.wte, transformer.wpe, lm_head)")
def nanogpt() -> Family:
    return Family("nanogpt", _is_nanogpt, _nanogpt_tables, lambda model: f"nanoGPT-style {type(model).__name__}")
