"""Presets of every model of the package, keyed by the names users type: ``Model.from_preset(name, **overrides)``
builds one, :func:`preset_arguments` gives its class and arguments. Entries name their class by path, so this module
imports no model. Each preset has a YAML twin in ``examples/configs/<name>.yaml``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from lightning_embinit.models.optimization import noam_peak_lr

Groups = tuple[dict[str, Any], dict[str, Any]]
"""A preset's ``architecture`` and ``optimizer`` fields."""
Builder = Callable[[Mapping[str, Any], Mapping[str, Any]], Groups]
"""The groups of a preset from the user's ``architecture`` and ``optimizer`` overrides."""
ADAM = {"betas": (0.9, 0.98), "eps": 1e-9}
"""The Adam of [K] and [R]; the learning rate and schedule are each preset's."""


def _kim(preset: str, lr: float, **fields: Any) -> Builder:
    """Kim et al.'s transformer ([K], see :data:`PRESETS`): ReLU, interleaved P at √d, Xavier, Adam at ``lr``;
    ``fields``: the preset's own (layers, pooling, segments)."""

    def build(architecture: Mapping[str, Any], optimizer: Mapping[str, Any]) -> Groups:
        d, heads = architecture.get("d_model", 512), architecture.get("num_heads")  # an override: checked by the config
        if heads is None:
            heads = next((count for count in (8, 10) if d % count == 0), None)
            if heads is None:
                raise ValueError(f"{preset}: d_model={d} is divisible by neither 8 nor 10 heads; pass num_heads")
        return {
            "d_model": d,
            "num_heads": heads,
            **fields,
            "ffn_dim": 4 * d,
            "dropout": 0.1,
            "pre_norm": False,
            "activation": "relu",
            "positional": "interleaved",
            "input_scale": "sqrt_d",
            "init_scheme": "xavier",
        }, {"lr": lr, "lr_schedule": "constant", **ADAM}

    return build


def _reinforced(d: int, heads: int, ffn: int, layers: int, **fields: Any) -> Builder:
    """[R]'s sizes and schedule (docs/concepts.md, :data:`PRESETS`) with m = ``d``."""

    def build(architecture: Mapping[str, Any], optimizer: Mapping[str, Any]) -> Groups:
        m, warmup = architecture.get("d_model", d), optimizer.get("warmup_steps", 4000)
        return {
            "d_model": m,
            "num_heads": heads,
            "qk_head_dim": m,
            "v_head_dim": m,
            "ffn_dim": ffn,
            "num_encoder_layers": layers,
            "num_decoder_layers": layers,
            "dropout": 0.1,
            "activation": "relu",
            "positional": "half",
            "max_len": 128,
            **fields,
        }, {"lr_schedule": "noam", "warmup_steps": warmup, "lr": noam_peak_lr(m, warmup), **ADAM}

    return build


_SEQ2SEQ = "lightning_embinit.models.seq2seq.TransformerSeq2Seq"
_CLASSIFIER = "lightning_embinit.models.classifier.TransformerClassifier"
PRESETS: dict[str, tuple[str, Builder]] = {
    "kim_multi30k": (_SEQ2SEQ, _kim("kim_multi30k", 2e-4, num_encoder_layers=3, num_decoder_layers=3)),
    "reinforced_baseline": (_SEQ2SEQ, _reinforced(128, 8, 512, 4, input_scale="sqrt_d")),
    "reinforced_proposed": (
        "lightning_embinit.models.reinforced.ReinforcedTransformerSeq2Seq",
        _reinforced(64, 4, 256, 2),
    ),
    "kim_sst2": (_CLASSIFIER, _kim("kim_sst2", 1e-4, num_layers=3, pooling="cls", num_segments=0)),
    "kim_mnli": (_CLASSIFIER, _kim("kim_mnli", 1e-4, num_layers=3, pooling="cls", num_segments=2)),
}
"""Preset name → (model class path, the ``architecture`` and ``optimizer`` fields from their overrides).
``kim_multi30k``: Kim et al.'s protocol ([K]: 3+3 post-LN layers, 8 heads — 10 when d is not a multiple of 8 —
dropout 0.1, Adam lr 2e-4, FFN 4d; d = the embedding source's width, 512 by default). ``reinforced_baseline``: the
reinforced transformer paper's baseline ([R], docs/concepts.md: 4+4, m = 128, FFN 512, 8 heads, r = q = 128, tutorial
PE layout, Noam with warmup 4000 and peak m^−½·w^−½). ``reinforced_proposed``: [R]'s proposed model (2+2, m = 64, FFN
256, 4 heads, r = q = 64, same schedule with its own m). In both, r, q and the peak lr follow an overridden
``d_model`` and ``warmup_steps``. ``kim_sst2``, ``kim_mnli``: [K]'s encoder classifier (3 post-LN layers, ``cls``
pooling; MNLI's sentence pairs with 2 learned segment vectors)."""


def preset_arguments(name: str, **overrides: Any) -> tuple[type, dict[str, Any]]:
    """(model class, constructor arguments) of preset ``name``; ``overrides``' ``architecture``/``optimizer`` fields
    replace the preset's (``d_model``, ``warmup_steps`` also recompute what derives from them)."""
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
