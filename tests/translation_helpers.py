"""Real Multi30k slices, tiny translation models and trainers shared by the translation tests."""

from __future__ import annotations

import gzip

import lightning as L

from lightning_embinit.data.translation import TranslationDataModule
from tests.shared_data import require_shared_data

TINY = {
    "architecture": {
        "d_model": 32,
        "num_heads": 4,
        "num_encoder_layers": 2,
        "num_decoder_layers": 2,
        "ffn_dim": 64,
        "dropout": 0.0,
        "max_len": 64,
    },
    "max_decode_len": 24,
}
TINY_REINFORCED = {
    "architecture": {**TINY["architecture"], "d_model": 16, "qk_head_dim": 8, "v_head_dim": 8},
    "optimizer": {"lr_schedule": "constant", "lr": 1e-3},
    "max_decode_len": 24,
}


def settings(base: dict, *, architecture: dict | None = None, optimizer: dict | None = None, **own) -> dict:
    """A system's arguments: ``base`` (:data:`TINY`, :data:`TINY_REINFORCED`) with fields replaced in its groups
    and ``own`` arguments added."""
    return {
        **base,
        **own,
        "architecture": {**base.get("architecture", {}), **(architecture or {})},
        "optimizer": {**base.get("optimizer", {}), **(optimizer or {})},
    }


def multi30k_lines(split: str, lang: str, count: int, start: int = 0) -> list[str]:
    """``count`` raw lines of a Multi30k split (``train``, ``val``, ``test_2016_flickr``) from line ``start``."""
    path = require_shared_data("multi30k", f"{split}.{lang}.gz")
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle]
    return lines[start : start + count]


def multi30k_data(examples: int = 48, batch_size: int = 16, **options) -> TranslationDataModule:
    """A de→en TranslationDataModule on the first ``examples`` pairs of each Multi30k split, word level."""
    options = {"min_freq": 1, "seed": 0, **options}
    return TranslationDataModule(
        data_dir=str(require_shared_data("multi30k")), max_examples=examples, batch_size=batch_size, **options
    )


def tokenizer_configs(data: TranslationDataModule) -> dict:
    return {"src_tokenizer": data.src_tokenizer_config, "tgt_tokenizer": data.tgt_tokenizer_config}


def trainer(tmp_path, **options) -> L.Trainer:
    options = {
        "accelerator": "cpu",
        "devices": 1,
        "max_steps": 3,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": tmp_path,
        "num_sanity_val_steps": 0,
        **options,
    }
    return L.Trainer(**options)
