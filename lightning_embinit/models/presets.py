"""Presets of every model of the package: one registry, keyed by the names users type.

``Model.from_preset(name, **overrides)`` builds one
(:meth:`~lightning_embinit.models.module.EmbinitModule.from_preset`); :func:`preset_arguments` gives the
class and arguments. Entries name their class by path, so this module imports no model. Each preset has
a YAML twin in ``examples/configs/<name>.yaml``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from lightning_embinit.models.optimization import noam_peak_lr

Groups = tuple[dict[str, Any], dict[str, Any]]
"""A preset's ``architecture`` and ``optimizer`` fields."""


def kim_heads(d_model: int, preset: str) -> int:
    """[K]'s head count: 8, or 10 when D is not a multiple of 8 (D = 300, 50)."""
    for heads in (8, 10):
        if d_model % heads == 0:
            return heads
    raise ValueError(f"{preset}: d_model={d_model} is divisible by neither 8 nor 10 heads; pass num_heads")


def _heads(architecture: Mapping[str, Any], d_model: int, preset: str) -> Any:
    """The overridden ``num_heads`` (checked by the config), else [K]'s count for ``d_model``."""
    return kim_heads(d_model, preset) if architecture.get("num_heads") is None else architecture["num_heads"]


KIM_OPTIMIZER = {"betas": (0.9, 0.98), "eps": 1e-9, "lr_schedule": "constant"}
"""Kim et al.'s Adam ([K]); the learning rate is each preset's."""


def _kim_multi30k(architecture: Mapping[str, Any], optimizer: Mapping[str, Any]) -> Groups:
    d = architecture.get("d_model", 512)
    return {
        "d_model": d,
        "num_heads": _heads(architecture, d, "kim_multi30k"),
        "num_encoder_layers": 3,
        "num_decoder_layers": 3,
        "ffn_dim": 4 * d,
        "dropout": 0.1,
        "pre_norm": False,
        "activation": "relu",
        "positional": "interleaved",
        "input_scale": "sqrt_d",
        "init_scheme": "xavier",
    }, {"lr": 2e-4, **KIM_OPTIMIZER}


def _reinforced_sizes(
    architecture: Mapping[str, Any], optimizer: Mapping[str, Any], d: int, heads: int, ffn: int, layers: int
) -> Groups:
    """[R]'s sizes and schedule (docs/concepts.md) with m = ``d``; r = q = m and the Noam peak lr = m^−½·w^−½ follow
    an overridden ``d_model`` and ``warmup_steps``."""
    d, warmup = architecture.get("d_model", d), optimizer.get("warmup_steps", 4000)
    return {
        "d_model": d,
        "num_heads": heads,
        "qk_head_dim": d,
        "v_head_dim": d,
        "ffn_dim": ffn,
        "num_encoder_layers": layers,
        "num_decoder_layers": layers,
        "dropout": 0.1,
        "activation": "relu",
        "positional": "half",
        "max_len": 128,
    }, {"lr_schedule": "noam", "warmup_steps": warmup, "lr": noam_peak_lr(d, warmup), "betas": (0.9, 0.98), "eps": 1e-9}


def _reinforced_baseline(architecture: Mapping[str, Any], optimizer: Mapping[str, Any]) -> Groups:
    sizes, schedule = _reinforced_sizes(architecture, optimizer, 128, 8, 512, 4)
    return {**sizes, "input_scale": "sqrt_d"}, schedule


def _reinforced_proposed(architecture: Mapping[str, Any], optimizer: Mapping[str, Any]) -> Groups:
    return _reinforced_sizes(architecture, optimizer, 64, 4, 256, 2)


def _kim_classifier(preset: str, num_segments: int) -> Callable[[Mapping[str, Any], Mapping[str, Any]], Groups]:
    """Kim et al.'s classifier ([K]): 3 post-LN layers, 8 heads (10 when d is not a multiple of 8), FFN 4d,
    dropout 0.1, ReLU, Xavier, Adam(0.9, 0.98, 1e−9) at lr 1e−4; d = the embedding source's width, 512 by
    default; ``num_segments`` learned segment vectors for sentence pairs (MNLI)."""

    def build(architecture: Mapping[str, Any], optimizer: Mapping[str, Any]) -> Groups:
        d = architecture.get("d_model", 512)
        return {
            "d_model": d,
            "num_heads": _heads(architecture, d, preset),
            "num_layers": 3,
            "ffn_dim": 4 * d,
            "dropout": 0.1,
            "pre_norm": False,
            "activation": "relu",
            "positional": "interleaved",
            "input_scale": "sqrt_d",
            "pooling": "cls",
            "num_segments": num_segments,
            "init_scheme": "xavier",
        }, {"lr": 1e-4, **KIM_OPTIMIZER}

    return build


_SEQ2SEQ = "lightning_embinit.models.seq2seq.TransformerSeq2Seq"
_CLASSIFIER = "lightning_embinit.models.classifier.TransformerClassifier"
PRESETS: dict[str, tuple[str, Callable[[Mapping[str, Any], Mapping[str, Any]], Groups]]] = {
    "kim_multi30k": (_SEQ2SEQ, _kim_multi30k),
    "reinforced_baseline": (_SEQ2SEQ, _reinforced_baseline),
    "reinforced_proposed": ("lightning_embinit.models.reinforced.ReinforcedTransformerSeq2Seq", _reinforced_proposed),
    "kim_sst2": (_CLASSIFIER, _kim_classifier("kim_sst2", 0)),
    "kim_mnli": (_CLASSIFIER, _kim_classifier("kim_mnli", 2)),
}
"""Preset name → (model class path, the ``architecture`` and ``optimizer`` fields from their overrides).
``kim_multi30k``: Kim et al.'s protocol ([K]: 3+3 post-LN layers, 8 heads — 10 when d is not a multiple of 8 —
dropout 0.1, Adam lr 2e-4, FFN 4d; d = the embedding source's width, 512 by default). ``reinforced_baseline``: the
reinforced transformer paper's baseline ([R], docs/concepts.md: 4+4, m = 128, FFN 512, 8 heads, r = q = 128, tutorial
PE layout, Noam with warmup 4000 and peak m^−½·w^−½). ``reinforced_proposed``: [R]'s proposed model (2+2, m = 64, FFN
256, 4 heads, r = q = 64, same schedule with its own m). In both, r, q and the peak lr follow an overridden
``d_model`` and ``warmup_steps``. ``kim_sst2``, ``kim_mnli``: [K]'s encoder classifier (:func:`_kim_classifier`)."""


def preset_arguments(name: str, **overrides: Any) -> tuple[type, dict[str, Any]]:
    """(model class, constructor arguments) of preset ``name`` with ``overrides`` applied: the model's own arguments
    as given, and ``architecture``/``optimizer`` mappings whose fields replace the preset's (``d_model``,
    ``warmup_steps`` also recompute what the preset derives from them)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}")
    class_path, build = PRESETS[name]
    module, class_name = class_path.rsplit(".", 1)
    architecture, optimizer = overrides.pop("architecture", {}), overrides.pop("optimizer", {})
    preset_architecture, preset_optimizer = build(architecture, optimizer)
    return getattr(importlib.import_module(module), class_name), {
        **overrides,
        "architecture": {**preset_architecture, **architecture},
        "optimizer": {**preset_optimizer, **optimizer},
    }
