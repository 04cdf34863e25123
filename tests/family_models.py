"""Tiny models of every family the package recognizes, built from configs (no download), and where each adds its
token and position vectors (the module whose input is s·E[ids] + P), for hand computations in the tests."""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass

import pytest
import torch
import transformers as T
from torch import nn

V, D, L = 100, 32, 64
SMALL = {"num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}


@dataclass(frozen=True)
class FamilyCase:
    """A tiny model's factory, the module whose first input is the first layer's input, and its token table."""

    build: object
    first_input: str
    table: str
    scale: float = 1.0
    positions: str = "none"


def _hf(config_class, model_class, **config):
    return lambda: model_class(config_class(vocab_size=V, **config))


HF_CASES = {
    "gpt2": FamilyCase(
        _hf(
            T.GPT2Config,
            T.GPT2LMHeadModel,
            n_embd=D,
            n_layer=1,
            n_head=2,
            n_positions=L,
            bos_token_id=0,
            eos_token_id=0,
        ),
        "transformer.drop",
        "transformer.wte",
        positions="learned",
    ),
    "bert": FamilyCase(
        _hf(T.BertConfig, T.BertForMaskedLM, hidden_size=D, max_position_embeddings=L, **SMALL),
        "bert.embeddings.LayerNorm",
        "bert.embeddings.word_embeddings",
        positions="learned",
    ),
    "roberta": FamilyCase(
        _hf(T.RobertaConfig, T.RobertaForMaskedLM, hidden_size=D, max_position_embeddings=L + 2, **SMALL),
        "roberta.embeddings.LayerNorm",
        "roberta.embeddings.word_embeddings",
        positions="learned",
    ),
    "opt": FamilyCase(
        _hf(
            T.OPTConfig,
            T.OPTForCausalLM,
            hidden_size=D,
            num_hidden_layers=1,
            num_attention_heads=2,
            ffn_dim=64,
            max_position_embeddings=L,
            word_embed_proj_dim=D,
        ),
        "model.decoder.layers.0",
        "model.decoder.embed_tokens",
        positions="learned",
    ),
    "bart": FamilyCase(
        _hf(
            T.BartConfig,
            T.BartForConditionalGeneration,
            d_model=D,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_position_embeddings=L,
            scale_embedding=True,
        ),
        "model.encoder.layernorm_embedding",
        "model.shared",
        scale=math.sqrt(D),
        positions="learned",
    ),
    "t5": FamilyCase(
        _hf(T.T5Config, T.T5ForConditionalGeneration, d_model=D, d_kv=16, d_ff=64, num_layers=1, num_heads=2),
        "encoder.block.0",
        "shared",
    ),
    "llama": FamilyCase(
        _hf(T.LlamaConfig, T.LlamaForCausalLM, hidden_size=D, num_key_value_heads=2, **SMALL),
        "model.layers.0",
        "model.embed_tokens",
    ),
    "mistral": FamilyCase(
        _hf(T.MistralConfig, T.MistralForCausalLM, hidden_size=D, num_key_value_heads=2, **SMALL),
        "model.layers.0",
        "model.embed_tokens",
    ),
    "qwen2": FamilyCase(
        _hf(T.Qwen2Config, T.Qwen2ForCausalLM, hidden_size=D, num_key_value_heads=2, **SMALL),
        "model.layers.0",
        "model.embed_tokens",
    ),
    "gpt_neox": FamilyCase(
        _hf(T.GPTNeoXConfig, T.GPTNeoXForCausalLM, hidden_size=D, **SMALL), "gpt_neox.layers.0", "gpt_neox.embed_in"
    ),
}


class NanoGPT(nn.Module):
    """nanoGPT's GPT, reduced to what the family adapter reads: wte + wpe, a block, lm_head tied to wte."""

    def __init__(self) -> None:
        super().__init__()
        self.transformer = nn.ModuleDict(
            {"wte": nn.Embedding(V, D), "wpe": nn.Embedding(L, D), "drop": nn.Dropout(0.0), "h": nn.Linear(D, D)}
        )
        self.lm_head = nn.Linear(D, V, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1])
        x = self.transformer.drop(self.transformer.wte(ids) + self.transformer.wpe(positions))
        return self.lm_head(self.transformer.h(x))


def torchtune_decoder(tied: bool = True) -> nn.Module:
    pytest.importorskip("torchtune", reason="torchtune is in the test extra")
    from torchtune.models.llama3_2 import llama3_2

    return llama3_2(
        vocab_size=V,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        embed_dim=D,
        max_seq_len=L,
        intermediate_dim=64,
        tie_word_embeddings=tied,
    )


def litgpt_gpt(scale_embeddings: bool = False) -> nn.Module:
    if importlib.util.find_spec("litgpt") is None:
        pytest.skip("litgpt is not installed (make install adds it without its dependency pins)")
    from litgpt.config import Config
    from litgpt.model import GPT

    return GPT(
        Config(
            n_layer=1,
            n_head=2,
            n_embd=D,
            block_size=L,
            vocab_size=V,
            padded_vocab_size=V,
            scale_embeddings=scale_embeddings,
        )
    )


OTHER_CASES = {
    "nanogpt": FamilyCase(NanoGPT, "transformer.drop", "transformer.wte", positions="learned"),
    "torchtune": FamilyCase(torchtune_decoder, "layers.0", "tok_embeddings"),
    "litgpt": FamilyCase(litgpt_gpt, "transformer.h.0", "transformer.wte"),
    "litgpt scaled": FamilyCase(lambda: litgpt_gpt(True), "transformer.h.0", "transformer.wte", scale=math.sqrt(D)),
}
CASES = {**HF_CASES, **OTHER_CASES}


class Holder(nn.Module):
    """The user's module: the model sits under an attribute name of the user's choosing."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.backbone = model


def first_layer_input(model: nn.Module, case: FamilyCase, ids: torch.Tensor) -> torch.Tensor:
    """What the model feeds its first layer for ``ids`` (eval mode: no dropout), read by a forward pre-hook."""
    seen: list[torch.Tensor] = []

    def grab(module, args, kwargs):
        seen.append((args[0] if args else next(iter(kwargs.values()))).detach())

    handle = model.get_submodule(case.first_input).register_forward_pre_hook(grab, with_kwargs=True)
    model.eval()
    with torch.no_grad():
        if isinstance(model, T.PreTrainedModel) and model.config.is_encoder_decoder:
            model(input_ids=ids, decoder_input_ids=ids[:, :2])
        elif isinstance(model, T.PreTrainedModel):
            model(input_ids=ids)
        else:
            model(ids)
    handle.remove()
    return seen[0]
