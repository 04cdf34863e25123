"""The reinforced-position-embedding translation system of [R] (docs/concepts.md#reinforced-model): the "proposed"
model's architecture :class:`~lightning_embinit.architectures.ReinforcedEncoderDecoder`, trained by
:class:`~lightning_embinit.models.seq2seq_module.Seq2SeqModule`."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.utilities import rank_zero_warn

from lightning_embinit.architectures.config import ReinforcedEncoderDecoderConfig
from lightning_embinit.architectures.reinforced import ReinforcedEncoderDecoder
from lightning_embinit.models.optimization import OptimizerConfig
from lightning_embinit.models.seq2seq_module import Seq2SeqModule

LEAK_WARNING = (
    "target_normalization='sequence' (the paper's token normalization) standardizes each target sequence "
    "with statistics of all its positions, so a teacher-forced decoder position sees statistics of later "
    "target tokens: training and validation losses leak the future and are not comparable with the "
    "baseline's, and decoding (which sees only the prefix) differs from training. Compare BLEU from real "
    "decoding, or use target_normalization='causal'."
)
_leak_warned = False


class ReinforcedTransformerSeq2Seq(Seq2SeqModule):
    """The reinforced transformer paper's proposed model ([R], docs/concepts.md) as a Lightning system.

    ``architecture``: :class:`~lightning_embinit.architectures.ReinforcedEncoderDecoderConfig` (the defaults of
    ``reinforced_proposed``); ``optimizer``: Noam with ``lr=None``, the peak m^−½·w^−½ of this ``d_model`` and
    ``warmup_steps``; the rest is :class:`Seq2SeqModule`'s. ``target_normalization="sequence"`` warns once per
    process (``LEAK_WARNING``).
    """

    architecture_class = ReinforcedEncoderDecoder
    architecture_config = ReinforcedEncoderDecoderConfig

    def __init__(
        self,
        *,
        architecture: ReinforcedEncoderDecoderConfig = ReinforcedEncoderDecoderConfig(),
        optimizer: OptimizerConfig = OptimizerConfig(lr=None, lr_schedule="noam"),
        **options: Any,
    ) -> None:
        super().__init__(architecture=architecture, optimizer=optimizer, **options)
        if self.model.config.target_normalization == "sequence":
            global _leak_warned
            if not _leak_warned:
                _leak_warned = True
                rank_zero_warn(LEAK_WARNING)
