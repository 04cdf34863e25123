"""Shared transformer blocks: attention masks, pre-/post-LN, cross-attention, initialization."""

import math

import pytest
import torch

from lightning_embinit.models import FeedForward, MultiHeadAttention, TransformerBlock, init_non_embedding_
from lightning_embinit.models.blocks import build_positional, resolve_scale


def test_attention_matches_explicit_softmax():
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4)
    x = torch.randn(2, 5, 16)
    q, k, v = (attn._heads(p(x), 4) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    scores = q @ k.transpose(-1, -2) / math.sqrt(4)
    scores = scores.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf"))
    expected = attn.out_proj((scores.softmax(-1) @ v).transpose(1, 2).flatten(-2))
    torch.testing.assert_close(attn(x, causal=True), expected, rtol=1e-5, atol=1e-5)


def test_cross_attention_with_other_widths_and_padding_mask():
    torch.manual_seed(0)
    attn = MultiHeadAttention(8, 2, key_dim=16, value_dim=4, qk_head_dim=6, v_head_dim=3)
    query, keys, values = torch.randn(2, 3, 8), torch.randn(2, 5, 16), torch.randn(2, 5, 4)
    pad = torch.tensor([[False] * 5, [False, False, True, True, True]])
    out = attn(query, keys, values, key_padding_mask=pad)
    assert out.shape == (2, 3, 8)
    changed = values.clone()
    changed[1, 3:] += 100.0  # padded keys/values of sequence 1 must not matter
    torch.testing.assert_close(attn(query, keys, changed, key_padding_mask=pad), out)


def test_causal_with_padding_mask_still_causal():
    torch.manual_seed(0)
    attn = MultiHeadAttention(8, 2)
    x = torch.randn(1, 4, 8)
    pad = torch.tensor([[False, False, False, True]])
    out = attn(x, causal=True, key_padding_mask=pad)
    changed = x.clone()
    changed[0, 2] += 5.0
    torch.testing.assert_close(attn(changed, causal=True, key_padding_mask=pad)[0, :2], out[0, :2])


@pytest.mark.parametrize("pre_norm", [True, False])
def test_post_and_pre_norm_blocks_with_cross_attention(pre_norm):
    torch.manual_seed(0)
    block = TransformerBlock(16, 4, 32, pre_norm=pre_norm, cross_attention=True, activation="relu", norm="rmsnorm")
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 7, 16)
    out = block(x, memory, causal=True)
    assert out.shape == x.shape
    if not pre_norm:  # post-LN output is normalized (RMSNorm γ = 1: unit root-mean-square)
        torch.testing.assert_close(out.square().mean(-1), torch.ones(2, 3), rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError, match="memory"):
        block(x)


def test_zero_init_residual_makes_pre_ln_block_the_identity():
    torch.manual_seed(0)
    block = TransformerBlock(16, 4, 32, cross_attention=True)
    init_non_embedding_(block, "xavier", zero_init_residual=True)
    x = torch.randn(2, 3, 16)
    torch.testing.assert_close(block(x, torch.randn(2, 4, 16), causal=True), x)


def test_non_embedding_schemes():
    torch.manual_seed(0)
    block = TransformerBlock(256, 4, 1024)
    init_non_embedding_(block, "hf")
    assert abs(block.self_attn.q_proj.weight.std().item() - 0.02) < 1e-3
    assert block.self_attn.q_proj.bias.abs().max() == 0
    init_non_embedding_(block, "he_ffn")
    assert abs(block.ffn.fc1.weight.std().item() - math.sqrt(2 / 256)) < 2e-3  # He on the layer feeding GELU
    xavier = math.sqrt(2 / (256 + 256))
    assert abs(block.self_attn.q_proj.weight.std().item() - xavier) < 2e-3  # Xavier on attention
    assert abs(block.ffn.fc2.weight.std().item() - math.sqrt(2 / (1024 + 256))) < 2e-3
    init_non_embedding_(block, "xavier")
    assert abs(block.ffn.fc1.weight.std().item() - math.sqrt(2 / (1024 + 256))) < 2e-3
    with pytest.raises(ValueError, match="non-embedding init scheme"):
        init_non_embedding_(block, "glorot")


def test_feed_forward_and_options_reject_unknown_names():
    with pytest.raises(ValueError, match="activation"):
        FeedForward(4, 8, activation="swish")
    with pytest.raises(ValueError, match="positional"):
        build_positional("rope", 8, 4)
    with pytest.raises(ValueError, match="embedding_scale"):
        resolve_scale("big", 4)
    assert resolve_scale("sqrt_d", 256) == 16.0 and resolve_scale("none", 9) == 1.0 and resolve_scale(2.5, 9) == 2.5


@pytest.mark.parametrize("name", ["none", "relu", "gelu", "tanh"])
def test_one_activation_mapping_serves_ffn_and_head(name):
    from lightning_embinit.models.blocks import ACTIVATION_FUNCTIONS, ACTIVATIONS, activation_fn
    from lightning_embinit.models.heads import HEAD_ACTIVATIONS, OutputHead

    function = ACTIVATION_FUNCTIONS[name]
    assert set(ACTIVATIONS) <= set(ACTIVATION_FUNCTIONS) and HEAD_ACTIVATIONS == tuple(ACTIVATION_FUNCTIONS)
    torch.manual_seed(0)
    head = OutputHead("tied_orthogonal", 8, 11, bias=True, activation=name)
    h = torch.randn(2, 3, 8)
    torch.testing.assert_close(head.transform(h), function(head.proj(h)))
    z = torch.randn(400_000, dtype=torch.float64)
    assert head.second_moment() == pytest.approx(function(z).square().mean().item(), rel=0.01)
    if name in ACTIVATIONS:
        ffn = FeedForward(8, 16, activation=name)
        torch.testing.assert_close(ffn(h), ffn.fc2(function(ffn.fc1(h))))
    else:
        with pytest.raises(ValueError, match="activation"):
            activation_fn(name)
    with pytest.raises(ValueError, match="head activation"):
        OutputHead("tied_orthogonal", 8, 11, activation="swish")
