"""The vanilla encoder–decoder translation system: [R]'s baseline and [K]'s testbed (docs/concepts.md#kim-testbed,
#reinforced-baseline): the architecture :class:`~lightning_embinit.architectures.EncoderDecoder`, trained by
:class:`~lightning_embinit.models.seq2seq_module.Seq2SeqModule`."""

from __future__ import annotations

from typing import Any

from lightning_embinit.architectures.config import EncoderDecoderConfig
from lightning_embinit.architectures.encoder_decoder import EncoderDecoder
from lightning_embinit.models.optimization import OptimizerConfig
from lightning_embinit.models.seq2seq_module import Seq2SeqModule


class TransformerSeq2Seq(Seq2SeqModule):
    """The post-LN encoder–decoder transformer of [R]'s baseline and Kim et al. [K] as a Lightning system.

    ``architecture``: :class:`~lightning_embinit.architectures.EncoderDecoderConfig` (``d_model`` m, ``num_heads`` p,
    ``qk_head_dim`` r, ``v_head_dim`` q, ``ffn_dim`` s …); ``optimizer``: Adam at 2e-4 ([K]; ``lr=None`` with
    ``lr_schedule="noam"``: [R]'s peak m^−½·w^−½, the number kept); the rest is :class:`Seq2SeqModule`'s.
    """

    architecture_class = EncoderDecoder
    architecture_config = EncoderDecoderConfig

    def __init__(
        self,
        *,
        architecture: EncoderDecoderConfig = EncoderDecoderConfig(),
        optimizer: OptimizerConfig = OptimizerConfig(lr=2e-4),
        **options: Any,
    ) -> None:
        super().__init__(architecture=architecture, optimizer=optimizer, **options)
