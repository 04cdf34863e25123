"""The package's networks as plain ``torch.nn.Module``\\ s, usable without Lightning.

Each takes its typed config (:mod:`~lightning_embinit.architectures.config`) and vocabularies
(:class:`~lightning_embinit.vocabulary.Vocabulary` or a size), is built from the shared blocks of
:mod:`lightning_embinit.modules`, and is an :class:`~lightning_embinit.init.EmbeddingHost` (its
``embedding_slots()`` feed the torch-only initialization API). The Lightning systems of
:mod:`lightning_embinit.models` hold one as ``self.model``.
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
