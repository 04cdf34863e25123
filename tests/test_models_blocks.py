"""Shared transformer blocks: attention masks, pre-/post-LN, cross-attention, initialization."""

import math

import pytest
import torch

from lightning_embinit.models import FeedForward, MultiHeadAttention, TransformerBlock, init_non_embedding_
from lightning_embinit.modules.inputs import build_positional, resolve_scale


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
    with pytest.raises(ValueError, match="embedding_scale"):  # TiedEmbeddingLM's argument, the default name
        resolve_scale("big", 4)
    with pytest.raises(ValueError, match="^input_scale must be 'sqrt_d', 'inv_sqrt_d', 'none' or a number, got 'big'$"):
        resolve_scale("big", 4, option="input_scale")  # each model names its own argument
    assert resolve_scale("sqrt_d", 256) == 16.0 and resolve_scale("none", 9) == 1.0 and resolve_scale(2.5, 9) == 2.5


@pytest.mark.parametrize("name", ["none", "relu", "gelu", "tanh"])
def test_one_activation_mapping_serves_ffn_and_head(name):
    from lightning_embinit.modules.blocks import ACTIVATION_FUNCTIONS, ACTIVATIONS, activation_fn
    from lightning_embinit.modules.heads import HEAD_ACTIVATIONS, OutputHead

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


# ------------------------------------------------------------------ issue 8 §1: layouts, scales, inputs, stacks
from lightning_embinit.init.positional import sinusoidal_encoding  # noqa: E402
from lightning_embinit.models import EmbeddingInput, TransformerStack  # noqa: E402


def test_positional_kinds_layouts_and_input_scales():
    half, halves = build_positional("half", 12, 8), build_positional("halves", 12, 8)
    torch.testing.assert_close(half.encoding(), halves.encoding())
    torch.testing.assert_close(half.encoding(), sinusoidal_encoding(12, 8, layout="half"))
    torch.testing.assert_close(half.encoding()[:, :4], build_positional("interleaved", 12, 8).encoding()[:, 0::2])
    torch.testing.assert_close(build_positional("sinusoidal", 12, 8, layout="half").encoding(), half.encoding())
    torch.testing.assert_close(half(3, offset=4), half.encoding()[4:7])
    assert build_positional("none", 12, 8) is None and build_positional("learned", 12, 8).weight.shape == (12, 8)
    for kind in ("half", "learned"):  # the one length check: the positional table's own
        assert build_positional(kind, 12, 8)(4, offset=8).shape == (4, 8)
        with pytest.raises(ValueError, match="sequence length 13 exceeds max_len=12"):
            build_positional(kind, 12, 8)(5, offset=8)
    with pytest.raises(ValueError, match="interleaved, half, halves, sinusoidal, learned, none"):
        build_positional("rotary", 8, 4)
    assert resolve_scale("inv_sqrt_d", 64) == 0.125 and resolve_scale("3", 64) == 3.0
    with pytest.raises(ValueError, match="'sqrt_d', 'inv_sqrt_d', 'none' or a number"):
        resolve_scale("sqrt", 4)


def test_embedding_input_is_scaled_lookup_plus_positional_rows_at_an_offset():
    torch.manual_seed(0)
    table = torch.nn.Embedding(11, 8, padding_idx=0)
    layer = EmbeddingInput(table, scale="inv_sqrt_d", positional="half", max_len=10)
    ids = torch.tensor([[3, 4, 5], [6, 0, 0]])
    expected = table(ids) / math.sqrt(8) + sinusoidal_encoding(10, 8, layout="half")[2:5]
    torch.testing.assert_close(layer(ids, offset=2), expected)
    slot = layer.slot("src", tokens=[f"t{i}" for i in range(11)])
    assert slot.input_scale == pytest.approx(8**-0.5) and slot.padding_idx == 0
    torch.testing.assert_close(slot.positional_encoding(), sinusoidal_encoding(10, 8, layout="half"))
    assert EmbeddingInput(table, positional="none").slot("x").positional_encoding is None
    with pytest.raises(ValueError, match="exceeds max_len=10"):
        layer(ids, offset=8)
    with pytest.raises(ValueError, match="token id 11 is outside"):
        layer(torch.tensor([[11]]))
    with pytest.raises(ValueError, match="^scale must be"):
        EmbeddingInput(table, scale="big")


def test_one_vocabulary_resolver_names_each_models_arguments():
    from lightning_embinit.models.module import resolve_tokenizer
    from lightning_embinit.text.tokenization import TextTokenizer

    tokenizer = TextTokenizer.word(["a man runs", "a dog runs"], min_freq=1)
    resolved, size = resolve_tokenizer(tokenizer.to_config(), None)
    assert resolved.tokens == tokenizer.tokens and size == len(tokenizer)
    assert resolve_tokenizer(None, 9) == (None, 9)
    with pytest.raises(
        ValueError, match=f"^tgt_vocab_size=3 disagrees with the tgt_tokenizer's {len(tokenizer)} tokens$"
    ):
        resolve_tokenizer(tokenizer, 3, option="tgt_tokenizer", size_option="tgt_vocab_size")
    with pytest.raises(ValueError, match="give src_tokenizer .* or src_vocab_size ≥ 5; got src_vocab_size=4"):
        resolve_tokenizer(None, 4, option="src_tokenizer", size_option="src_vocab_size", min_size=5)


def test_self_attention_with_values_of_their_own_width():
    torch.manual_seed(0)
    attn = MultiHeadAttention(12, 2, value_dim=5, qk_head_dim=4, v_head_dim=3)
    x, values = torch.randn(2, 6, 12), torch.randn(2, 6, 5)
    q, k = attn._heads(attn.q_proj(x), 4), attn._heads(attn.k_proj(x), 4)
    v = attn._heads(attn.v_proj(values), 3)
    weights = (q @ k.transpose(-1, -2) / 2.0).masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf"))
    expected = attn.out_proj((weights.softmax(-1) @ v).transpose(1, 2).flatten(-2))
    torch.testing.assert_close(attn(x, None, values, causal=True), expected, rtol=1e-5, atol=1e-5)
    assert attn.v_proj.in_features == 5 and attn.out_proj.in_features == 6 and attn.q_proj.out_features == 8


def _stacks(pre_norm=False, dim=16):
    torch.manual_seed(0)
    options = {"pre_norm": pre_norm, "activation": "relu"}
    encoder = TransformerStack(2, dim, 4, 32, **options).eval()
    decoder = TransformerStack(2, dim, 4, 32, causal=True, cross_attention=True, **options).eval()
    return encoder, decoder


@pytest.mark.parametrize("pre_norm", [False, True])
def test_padding_changes_no_non_padding_output_of_encoder_or_decoder(pre_norm):
    encoder, decoder = _stacks(pre_norm)
    src, tgt = torch.randn(3, 5, 16), torch.randn(3, 4, 16)
    src_pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 4 + [True]])
    tgt_pad = torch.tensor([[False] * 4, [False] * 2 + [True] * 2, [False] * 4])
    memory = encoder(src, padding_mask=src_pad)
    out = decoder(tgt, memory, padding_mask=tgt_pad, memory_padding_mask=src_pad)
    more_src = torch.cat((src, torch.randn(3, 3, 16) * 50), dim=1)  # 3 more padding positions of garbage
    more_src_pad = torch.cat((src_pad, torch.ones(3, 3, dtype=torch.bool)), dim=1)
    more_tgt = torch.cat((tgt, torch.randn(3, 2, 16) * 50), dim=1)
    more_tgt_pad = torch.cat((tgt_pad, torch.ones(3, 2, dtype=torch.bool)), dim=1)
    more_src[1, 3:5] += 100.0  # the existing padding changes too
    more_memory = encoder(more_src, padding_mask=more_src_pad)
    more_out = decoder(more_tgt, more_memory, padding_mask=more_tgt_pad, memory_padding_mask=more_src_pad)
    torch.testing.assert_close(more_memory[~more_src_pad], memory[~src_pad], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(more_out[:, :4][~tgt_pad], out[~tgt_pad], rtol=1e-5, atol=1e-5)
    assert (encoder.final_norm is not None) == pre_norm


def test_decoder_is_causal_and_encoder_is_not():
    encoder, decoder = _stacks()
    x, memory = torch.randn(2, 6, 16), torch.randn(2, 5, 16)
    changed = x.clone()
    changed[:, 4] += 3.0
    torch.testing.assert_close(decoder(changed, memory)[:, :4], decoder(x, memory)[:, :4])
    assert not torch.allclose(decoder(changed, memory)[:, 4], decoder(x, memory)[:, 4])
    assert not torch.allclose(encoder(changed)[:, 0], encoder(x)[:, 0])  # bidirectional


def test_cached_incremental_decoding_equals_the_full_forward():
    encoder, decoder = _stacks(pre_norm=True)
    memory_pad = torch.tensor([[False] * 5, [False] * 2 + [True] * 3])
    memory = encoder(torch.randn(2, 5, 16), padding_mask=memory_pad)
    y = torch.randn(2, 6, 16)
    full = decoder(y, memory, memory_padding_mask=memory_pad)
    cache = decoder.new_cache()
    steps = [decoder(y[:, :2], memory, memory_padding_mask=memory_pad, cache=cache)]  # two at once, then one by one
    steps += [decoder(y[:, t : t + 1], memory, memory_padding_mask=memory_pad, cache=cache) for t in range(2, 6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    assert cache.length == 6 and cache.self_attention[0].key.shape == (2, 4, 6, 4)
    assert cache.cross_attention[1].key.shape == (2, 4, 5, 4)  # projected once from the memory
    cache.reorder_(torch.tensor([1, 1]))
    assert torch.equal(cache.self_attention[1].value[0], cache.self_attention[1].value[1])


def test_dropout_placement_options():
    block = TransformerBlock(16, 4, 32, dropout=0.3, cross_attention=True)
    assert block.self_attn.dropout == block.cross_attn.dropout == block.ffn.dropout.p == block.dropout.p == 0.3
    vaswani = TransformerBlock(16, 4, 32, dropout=0.3, attention_dropout=0.0, activation_dropout=0.0)
    assert vaswani.self_attn.dropout == 0.0 and vaswani.ffn.dropout.p == 0.0 and vaswani.dropout.p == 0.3
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16)
    vaswani.eval()
    torch.testing.assert_close(vaswani(x), vaswani(x))  # no dropout in evaluation


def test_cpu_dropout_keeps_the_rate_scale_and_seeding_of_nn_dropout():
    from lightning_embinit.modules.blocks import Dropout

    layer = Dropout(0.1)
    x = torch.ones(400, 1000, requires_grad=True)
    torch.manual_seed(3)
    y = layer(x)
    assert abs((y == 0).float().mean().item() - 0.1) < 0.003  # p = 6554/65536
    assert y.unique().tolist() == [0.0, pytest.approx(1 / 0.9)]
    y.sum().backward()
    torch.testing.assert_close(x.grad, y.detach())  # the gradient passes the kept elements, scaled
    torch.manual_seed(3)
    torch.testing.assert_close(layer(x), y)
    assert not torch.equal(layer(x), y)
    assert layer(torch.ones(3, 5, dtype=torch.bfloat16)).dtype == torch.bfloat16
    layer.eval()
    assert torch.equal(layer(x), x)
    assert Dropout(0.0)(x) is x or torch.equal(Dropout(0.0)(x), x)


def _where_mask(layer, x):
    """The CPU dropout mask as it was first built (``torch.where`` over the 16-bit shares): the reference."""
    words = torch.randint(-(2**63), 2**63 - 1, ((x.numel() + 3) // 4,), dtype=torch.int64)
    shares = words.view(torch.int16)[: x.numel()].view(x.shape)
    scale, zero = x.new_full((), 1.0 / (1.0 - layer.p)), x.new_zeros(())
    return torch.where(shares >= round(layer.p * 65536) - 32768, scale, zero)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("p", [0.1, 0.3, 0.77])
def test_cpu_dropout_masks_built_from_bits_equal_the_where_masks(dtype, p):
    from lightning_embinit.modules.blocks import Dropout

    layer, x = Dropout(p), torch.randn(3, 7, 33).to(dtype)
    for seed in (0, 1, 2):
        torch.manual_seed(seed)
        mask = layer.mask(x)
        torch.manual_seed(seed)
        expected = _where_mask(layer, x)
        assert mask.dtype == dtype and torch.equal(mask, expected)


def test_float_bits_are_the_bits_torch_rounds_to():
    from lightning_embinit.modules.blocks import float_bits

    generator = torch.Generator().manual_seed(0)
    values = [1 / 0.9, 2.0, 1 / 0.7, 1e-3, 65504.0, *(1 / (1 - 0.999 * torch.rand(300, generator=generator))).tolist()]
    for dtype, bits in [(torch.float32, torch.int32), (torch.bfloat16, torch.int16), (torch.float16, torch.int16)]:
        for value in values:
            assert float_bits(value, dtype) == torch.tensor(value, dtype=dtype).view(bits).item(), (dtype, value)
    assert float_bits(1 / 0.9, torch.float64) == torch.tensor(1 / 0.9, dtype=torch.float64).view(torch.int64).item()


def test_a_seq2seq_step_with_dropout_is_the_same_as_with_the_where_masks(monkeypatch):
    """Outputs and gradients of a training step at fixed seeds, before (the reference masks) and after."""
    from lightning_embinit.models import TransformerSeq2Seq
    from lightning_embinit.modules.blocks import Dropout

    def step():
        torch.manual_seed(0)
        model = TransformerSeq2Seq(
            src_vocab_size=40,
            tgt_vocab_size=30,
            architecture={"d_model": 16, "num_heads": 2, "ffn_dim": 32, "dropout": 0.2, "max_len": 16},
        )
        src, tgt = torch.randint(4, 40, (3, 6)), torch.randint(4, 30, (3, 7))
        loss = model.teacher_forced_loss(src, tgt, label_smoothing=0.1)[0]
        loss.backward()
        return loss.detach(), {name: p.grad for name, p in model.named_parameters()}

    loss, grads = step()
    monkeypatch.setattr(Dropout, "mask", lambda self, x: _where_mask(self, x) if self.training and self.p else None)
    expected_loss, expected_grads = step()
    assert torch.equal(loss, expected_loss)
    assert all(torch.equal(grads[name], expected_grads[name]) for name in grads)
