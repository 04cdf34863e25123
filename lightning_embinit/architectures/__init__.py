"""The package's networks as plain ``torch.nn.Module``\\ s, usable without Lightning: each takes its typed config
(:mod:`~lightning_embinit.architectures.config`) and vocabularies, and is an
:class:`~lightning_embinit.init.EmbeddingHost`. The Lightning systems of :mod:`lightning_embinit.models` hold one as
``self.model``.
"""

from lightning_embinit.architectures.causal_lm import CausalLM
from lightning_embinit.architectures.classifier import EncoderClassifier
from lightning_embinit.architectures.config import (
    CausalLMConfig,
    EncoderClassifierConfig,
    EncoderDecoderConfig,
    ReinforcedEncoderDecoderConfig,
)
from lightning_embinit.architectures.encoder_decoder import EncoderDecoder
from lightning_embinit.architectures.reinforced import ReinforcedEncoderDecoder

__all__ = [
    "CausalLM",
    "CausalLMConfig",
    "EncoderClassifier",
    "EncoderClassifierConfig",
    "EncoderDecoder",
    "EncoderDecoderConfig",
    "ReinforcedEncoderDecoder",
    "ReinforcedEncoderDecoderConfig",
]
