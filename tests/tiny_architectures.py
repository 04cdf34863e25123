"""Every causal, masked and sequence-to-sequence LM architecture of the installed transformers, built from a tiny
config (no download): the architecture names, the model class each is built as, the shrinking every config gets,
the few overrides some need, and the ones that cannot be built offline with the reason why."""

from __future__ import annotations

import warnings

import torch
import transformers as T
from transformers.models.auto import modeling_auto

V, D = 100, 32
"""The tiny vocabulary and width (no multiple of the width, so that no other dimension equals it by chance)."""

MAPPINGS = {
    "seq2seq": modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    "masked": modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    "causal": modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
}
ARCHITECTURES = sorted(set().union(*MAPPINGS.values()))
"""The architecture names (model types) of the three LM mappings."""


def model_class_name(name: str) -> str:
    """The class an architecture is built as: its sequence-to-sequence LM, else its masked LM, else its causal LM."""
    return next(mapping[name] for mapping in MAPPINGS.values() if name in mapping)


SIZES = {
    **dict.fromkeys(("hidden_size", "d_model", "n_embd", "embed_dim", "word_embed_proj_dim", "emb_dim"), D),
    **dict.fromkeys(("embedding_dim", "d_latents"), D),
    **dict.fromkeys(("head_dim", "d_kv", "d_head", "attention_head_size", "kv_channels", "v_head_dim"), 16),
    **dict.fromkeys(("kv_lora_rank", "q_lora_rank", "attention_hidden_size", "qk_head_dim", "index_head_dim"), 16),
    **dict.fromkeys(("index_n_heads",), 2),
    **dict.fromkeys(("index_topk",), 4),
    **dict.fromkeys(("hidden_size_global",), D),
    **dict.fromkeys(("qk_rope_head_dim", "qk_nope_head_dim", "rotary_dim", "mamba_d_state", "state_size"), 8),
    **dict.fromkeys(("num_attention_heads", "n_head", "n_heads", "num_heads"), 2),
    **dict.fromkeys(("encoder_attention_heads", "decoder_attention_heads", "num_self_attention_heads"), 2),
    **dict.fromkeys(("num_cross_attention_heads",), 2),
    **dict.fromkeys(("num_hidden_layers", "num_layers", "n_layer", "n_layers", "num_blocks"), 1),
    **dict.fromkeys(("encoder_layers", "decoder_layers", "num_decoder_layers", "num_encoder_layers"), 1),
    **dict.fromkeys(("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "n_inner"), 64),
    **dict.fromkeys(("d_inner", "feed_forward_size", "moe_intermediate_size", "shared_expert_intermediate_size"), 64),
    **dict.fromkeys(("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"), 4),
    "n_shared_experts": 1,
    **dict.fromkeys(("num_experts_per_tok", "moe_topk"), 2),
    **dict.fromkeys(("vocab_size", "src_vocab_size", "tgt_vocab_size", "decoder_vocab_size"), V),
    **dict.fromkeys(("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "context_length"), 64),
    **dict.fromkeys(("mamba_n_heads",), 4),
    **dict.fromkeys(("mamba_d_head",), 16),
    **dict.fromkeys(("mamba_d_ssm",), 64),
    **dict.fromkeys(("mamba_chunk_size", "chunk_size"), 8),
    "num_key_value_heads": 1,
    "embedding_size": 16,
    "num_latents": 8,
    "entity_vocab_size": 8,
    "num_self_attends_per_block": 1,
}
"""The generic shrinking: every config field of these names (in sub-configs too) that holds a number."""

NONE = ("vocab_size", "num_experts_per_tok", "n_routed_experts", "num_key_value_heads", "n_shared_experts")
"""Fields set even where the default config leaves them None."""

LAYER_COUNTS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "decoder_layers")

OVERRIDES: dict[str, dict] = {
    "gpt_neo": {"attention_types": [[["global"], 1]], "attention_layers": ["global"]},
    "diffllama": {"num_key_value_heads": 2},
    "esmc": {"num_key_value_heads": 2},
    "zaya": {"num_experts_per_tok": 1},
    "squeezebert": {"embedding_size": D},
    "mamba2": {"num_heads": 4, "head_dim": 16, "n_groups": 1},
    "reformer": {
        "attn_layers": ["local"],
        "axial_pos_shape": [8, 8],
        "axial_pos_embds_dim": [16, 16],
        "local_attn_chunk_length": 8,
        "lsh_attn_chunk_length": 8,
    },
    "laguna": {"num_attention_heads_per_layer": [2]},
    "gemma4_assistant": {"hidden_size_per_layer_input": 0},
    "dory": {"n_input_layers": 1, "n_recurrent_layers": 0, "n_output_layers": 0},
    "hunyuan_v1_dense": {"head_dim": 16},
    "hunyuan_v1_moe": {"head_dim": 16},
    "ministral": {"head_dim": 16},
    "nemotron": {"head_dim": 16},
    "esm": {"pad_token_id": 1, "mask_token_id": 2},
    "dots3_note": {
        "text_config": {"num_key_value_heads": 2},
        "vision_config": {"adapter_in_dim": D, "adapter_out_dim": D},
        "audio_config": {"adapter_input_size": D, "adapter_out_dim": D},
    },
    "dots3_note_text": {"num_key_value_heads": 2},
    "gemma3n_text": {"num_kv_shared_layers": 0, "vocab_size_per_layer_input": V, "hidden_size_per_layer_input": 8},
    "gemma4_unified_assistant": {"text_config": {"num_kv_shared_layers": 0}},
    "gemma4": {"text_config": {"vocab_size_per_layer_input": V, "hidden_size_per_layer_input": 8}},
    "gemma4_text": {"vocab_size_per_layer_input": V, "hidden_size_per_layer_input": 8},
    "musicgen": {"decoder": {"num_codebooks": 1}},
    "musicgen_melody": {"decoder": {"num_codebooks": 1}},
    "olmo_hybrid": {"num_hidden_layers": 2},
    "rwkv": {"num_hidden_layers": 2},
    "zamba2": {
        "mamba_headdim": 16,
        "n_mamba_heads": 4,
        "attention_hidden_size": 64,
        "attention_head_dim": 32,
        "hybrid_layer_ids": [0],
    },
    "blt": {"encoder_hash_byte_group_vocab": 64, "encoder_hash_byte_group_size": [3]},
    "vibevoice_asr": {
        part: {"num_filters": 2, "depths": [1] * 7, "ffn_expansion": 1}
        for part in ("acoustic_tokenizer_encoder_config", "semantic_tokenizer_encoder_config")
    },
    "longcat_flash": {"ffn_hidden_size": 64, "zero_expert_num": 2, "expert_ffn_hidden_size": 64},
    "roc_bert": {
        "pronunciation_embed_dim": 16,
        "pronunciation_vocab_size": 16,
        "shape_embed_dim": 16,
        "shape_vocab_size": 16,
    },
    "distilbert": {"dim": D, "hidden_dim": 64},
    "recurrent_gemma": {"lru_width": D, "attention_window_size": 16},
    **{
        name: {"unpadded_vocab_size": V, "swa_head_dim": 16}
        for name in ("inkling_text", "inkling2_text", "inkling2_loop_text")
    },
    "omniasr": {"audio_config": {"conv_dim": [D] * 7}},
    "qwen3_asr": {"audio_config": {"output_dim": D, "downsample_hidden_size": D}},
    "kimi_linear": {"linear_head_dim": 16},
    "bailing_hybrid": {"linear_head_dim": 16},
    "nemotron_h": {"ssm_state_size": 8, "mamba_num_heads": 4, "n_groups": 1, "moe_shared_expert_intermediate_size": 64},
    "lfm2_moe": {"layer_types": ["full_attention"]},
    "hrm_text": {"num_layers_per_stack": 1, "H_cycles": 1, "L_cycles": 1, "L_bp_cycles": [1]},
    **{
        name: {"encoder_config": {"hidden_dim": D, "dim_head": 16, "feedforward_mult": 1, "context_size": 8}}
        for name in ("granite_speech", "granite_speech_plus")
    },
    "funnel": {"block_sizes": [1, 1], "block_repeats": [1, 1], "num_decoder_layers": 1},
    "nemo_speechlm": {
        "audio_config": {"diarization_config": {"head_config": {"audio_hidden_size": D}}},
        "text_config": {
            "layers_block_type": ["linear_attention", "moe", "full_attention"],
            "mamba_num_heads": 4,
            "mamba_head_dim": 16,
            "n_groups": 1,
            "ssm_state_size": 8,
            "moe_shared_expert_intermediate_size": 64,
        },
    },
    "dbrx": {"attn_config": {"rope_theta": 10000.0, "clip_qkv": 8.0}},
    "cohere_compass_text": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
    **{name: {"num_key_value_heads": 2} for name in ("axk2", "deepseek_v32", "glm_moe_dsa")},
    "falcon": {"num_kv_heads": 2, "ffn_hidden_size": 64},
    "cpmant": {"dim_head": 16, "dim_ff": 64},
    "granite": {"embedding_multiplier": 12.0},
    "granitemoe": {"embedding_multiplier": 12.0},
    "falcon_h1": {"embedding_multiplier": 3.0},
    "marian": {"scale_embedding": True},
}
"""Per architecture: the fields the generic shrinking leaves inconsistent, and a few set on purpose (Granite's
``embedding_multiplier`` and Falcon-H1's not 1, so that the scale they announce is the one checked)."""

DERIVE = {"neomme", "olmo_hybrid"}
"""Architectures whose per-layer lists the config derives again (a cut list would break its pattern)."""

SKIPS: dict[str, str] = {
    "ibert": "its token table is a QuantEmbedding (integer-only BERT), not an nn.Embedding: no table to write",
    "perceiver": "its input embeddings are a bare parameter inside a preprocessor, not an nn.Embedding",
    **dict.fromkeys(
        ("musicgen", "musicgen_melody"),
        "an audio-codebook LM: one table per codebook (an nn.ModuleList), not a token table over a vocabulary",
    ),
    "gemma3n": "needs the timm package (its vision tower), an optional dependency not installed; gemma3n_text is built",
    "voxtral_realtime": "its forward needs audio input features (no text-only path)",
    **dict.fromkeys(
        ("gemma4_assistant", "gemma4_unified_assistant"),
        "a speculative-decoding draft model: its forward needs the target model's embeddings and key/value states",
    ),
}
"""Per architecture that cannot be built offline from a tiny config: why."""


def _layer_count(config: dict) -> int | None:
    return next((config[k] for k in LAYER_COUNTS if isinstance(config.get(k), int)), None)


def shrink(config: dict, overrides: dict, derive: bool = False) -> dict:
    """The config dict with every :data:`SIZES` field set, per-layer lists cut to the new layer count, special token
    ids moved into the tiny vocabulary (``derive``: per-layer lists left out, for the config to derive them), and
    ``overrides``; sub-configs likewise."""
    layers = _layer_count(config)
    for key, value in list(config.items()):
        if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
            config[key] = shrink(value, {}, derive)
        elif key in SIZES and (isinstance(value, int) and not isinstance(value, bool) or value is None and key in NONE):
            config[key] = SIZES[key]
    if isinstance(config.get("qk_rope_head_dim"), int) and "head_dim" in config:
        config["head_dim"] = config["qk_rope_head_dim"]  # multi-head latent attention: rotary on qk_rope_head_dim
    new_layers = _layer_count(config)
    for key, value in list(config.items()):
        if key == "per_layer_config" or isinstance(value, list) and layers and len(value) == layers > 1 and derive:
            del config[key]  # per-layer settings: the config derives them again for the new layer count
        elif isinstance(value, list) and layers and len(value) == layers > 1 and new_layers:
            config[key] = value[:new_layers]
        elif isinstance(key, str) and key.endswith("token_id") and isinstance(value, int) and value >= V:
            config[key] = V - 1 - sum(map(ord, key)) % 8
        elif isinstance(key, str) and key.endswith("token_id") and isinstance(value, list):
            config[key] = [v if not isinstance(v, int) or v < V else V - 1 for v in value]
    return merge(config, overrides)


def merge(config: dict, overrides: dict) -> dict:
    """``config`` with ``overrides`` written in (a dict value into the sub-config of that name)."""
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            merge(config[key], value)
        else:
            config[key] = value
    return config


def tiny_config(name: str) -> T.PretrainedConfig:
    """The architecture's default config, shrunk (:func:`shrink`); for a model class that takes one of the config's
    parts (a multimodal model's text model), that part."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = T.AutoConfig.for_model(name)
        config = type(config).from_dict(shrink(config.to_dict(), OVERRIDES.get(name, {}), name in DERIVE))
    wanted = getattr(T, model_class_name(name)).config_class
    if wanted is not None and not isinstance(config, wanted):
        parts = [getattr(config, key) for key in vars(config) if isinstance(getattr(config, key), wanted)]
        if parts:
            return parts[0]
    return config


def build(name: str, seed: int = 0) -> torch.nn.Module:
    """The tiny model of architecture ``name`` (its weights from ``seed``), in eval mode."""
    config = tiny_config(name)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(T, model_class_name(name))(config)
    if name == "xmod":
        model.set_default_language(next(iter(config.languages)))
    return model.eval()


EXTENSION_DIFFERS: dict[str, str] = {
    "fsmt": "transformers' resize grows the decoder's table as the output embeddings but not output_projection, and "
    "sets tgt_vocab_size for the encoder's table: the model cannot compute its loss after it (checked by hand in "
    "tests/test_extension_families.py)",
    "esm": "transformers' resize leaves lm_head.bias at the old size, so the model cannot run after it; "
    "extend_vocabulary grows the bias with the head",
    **dict.fromkeys(
        ("mllama", "moshi", "cpmant"),
        "the token table holds rows past the vocabulary of the head (image, audio or prompt rows): transformers' "
        "resize gives the head the table's new row count; extend_vocabulary grows the table only",
    ),
    "deepseek_v4": "its hash-routed experts map token ids through a (vocabulary, k) table that neither resize "
    "grows: the model cannot run on new ids after either",
    "blt": "a byte-level model whose local encoder reads hashed byte n-grams: neither resize makes it run on new ids",
    "inkling_text": "its logits are cut to config.unpadded_vocab_size, which neither resize changes",
    "reformer": "transformers' set_output_embeddings makes lm_head.bias the decoder's bias, two tensors before (the "
    "forward reads only the decoder's); extend_vocabulary keeps them two",
}
"""Architectures whose extended model is not compared with transformers' resized one, and why (their old rows are
still checked bit for bit)."""


def half(which: int) -> list[str]:
    """Every other architecture (``which`` = 0 or 1): two test files, one per pytest-xdist worker."""
    return ARCHITECTURES[which::2]


def coverage_sentence() -> str:
    """What docs/howto/family_hugging_face.md states: how many architectures the tests build and check."""
    skipped = sorted(name for name in ARCHITECTURES if name in SKIPS)
    return (
        f"{len(ARCHITECTURES) - len(skipped)} of the {len(ARCHITECTURES)} causal, masked and sequence-to-sequence LM "
        f"architectures of transformers {T.__version__}"
    )
