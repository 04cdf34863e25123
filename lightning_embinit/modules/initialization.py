"""Initialization of the non-embedding parameters, apart from the token embedding (docs/concepts.md#non-embedding-init).

Schemes (``init_scheme``):

- ``xavier``: Glorot uniform on every non-embedding weight matrix, as in [K];
- ``hf``: N(0, 0.02²) on every weight matrix, the Hugging Face ``initializer_range`` convention;
- ``he_ffn``: Glorot uniform on attention projections and other matrices, He (Kaiming normal,
  N(0, 2/fan_in)) on the FFN layers that feed the ReLU/GELU ([A]).

All schemes set biases to 0 and norms to γ = 1, β = 0. Token embeddings are left alone: they
are the subject of :class:`~lightning_embinit.callbacks.EmbeddingInitCallback`.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from lightning_embinit.checks import check_choice
from lightning_embinit.modules.blocks import FeedForward, TransformerBlock
from lightning_embinit.modules.inputs import LearnedPositionalEmbedding

NON_EMBEDDING_SCHEMES = ("xavier", "hf", "he_ffn")


def _init_matrix_(weight: torch.Tensor, scheme: str, *, feeds_activation: bool) -> None:
    if scheme == "hf":
        nn.init.normal_(weight, std=0.02)
    elif scheme == "he_ffn" and feeds_activation:
        nn.init.kaiming_normal_(weight, nonlinearity="relu")
    else:
        nn.init.xavier_uniform_(weight)


@torch.no_grad()
def init_non_embedding_(
    root: nn.Module, scheme: str = "xavier", *, zero_init_residual: bool = False, skip: Iterable[nn.Module] = ()
) -> None:
    """Re-initialize every ``nn.Linear``, norm and learned positional table under ``root``.

    ``skip`` lists modules initialized elsewhere (an orthogonal head projection). With
    ``zero_init_residual`` the last layer of every residual branch (attention ``out_proj``,
    FFN ``fc2``) is set to zero, so each block is the identity at initialization ([S]; docs/concepts.md#tied-head).
    """
    check_choice("non-embedding init scheme", scheme, NON_EMBEDDING_SCHEMES)
    skipped = {id(m) for m in skip}
    ffn_inputs = {id(m.fc1) for m in root.modules() if isinstance(m, FeedForward)}
    for module in root.modules():
        if id(module) in skipped:
            continue
        if isinstance(module, nn.Linear):
            _init_matrix_(module.weight, scheme, feeds_activation=id(module) in ffn_inputs)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
            module.reset_parameters()
        elif isinstance(module, LearnedPositionalEmbedding):
            _init_matrix_(module.weight, scheme, feeds_activation=False)
    if zero_init_residual:
        for block in root.modules():
            if isinstance(block, TransformerBlock):
                for layer in block.residual_projections():
                    layer.weight.zero_()
                    if layer.bias is not None:
                        layer.bias.zero_()
