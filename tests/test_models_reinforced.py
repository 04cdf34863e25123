"""ReinforcedTransformerSeq2Seq ([R]): token normalization, [TN ‖ P], values from TN, the target leak."""

import pytest
import torch

from lightning_embinit.init.positional import sinusoidal_encoding
from lightning_embinit.models import ReinforcedTransformerSeq2Seq, token_normalize
from lightning_embinit.models.optimization import noam_peak_lr
from lightning_embinit.modules.token_normalization import causal_token_normalize
from lightning_embinit.text.tokenization import TextTokenizer
from tests.translation_helpers import (
    TINY_REINFORCED,
    multi30k_data,
    multi30k_lines,
    settings,
    tokenizer_configs,
    trainer,
)

PAD = torch.tensor([[False] * 6, [False] * 4 + [True] * 2, [False] + [True] * 5])


def tiny(**options):
    return ReinforcedTransformerSeq2Seq(**settings(TINY_REINFORCED, src_vocab_size=30, tgt_vocab_size=40, **options))


def naive_tn(x, padding, causal):
    out = torch.zeros_like(x, dtype=torch.float64)
    for b in range(x.shape[0]):
        real = [i for i in range(x.shape[1]) if not padding[b, i]]
        for t in real:
            window = [i for i in real if i <= t] if causal else real
            rows = x[b, window].double()
            mean, var = rows.mean(0), rows.var(0, unbiased=False)
            out[b, t] = (x[b, t].double() - mean) / torch.sqrt(var + 1e-5)
    return out.float()


@pytest.mark.parametrize("causal", [False, True])
def test_token_normalization_against_a_naive_loop_over_non_pad_positions(causal):
    torch.manual_seed(0)
    x = torch.randn(3, 6, 5) * 3 + 2
    expected = naive_tn(x, PAD, causal)
    got = causal_token_normalize(x, PAD)[0] if causal else token_normalize(x, PAD)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert got[PAD].abs().max() == 0
    if not causal:  # every column of each sequence: mean 0, variance 1 over its real positions
        real = x[0]
        torch.testing.assert_close(got[0].mean(0), torch.zeros(5), atol=1e-5, rtol=0)
        torch.testing.assert_close(
            got[0].var(0, unbiased=False),
            torch.ones(5) * real.var(0, unbiased=False) / (real.var(0, unbiased=False) + 1e-5),
        )
    else:  # running sums carry over: two chunks equal one pass
        first, running = causal_token_normalize(x[:, :2], PAD[:, :2])
        second, _ = causal_token_normalize(x[:, 2:], PAD[:, 2:], running=running)
        torch.testing.assert_close(torch.cat((first, second), 1), got, rtol=1e-5, atol=1e-5)


def test_widths_follow_spec_2():
    model = ReinforcedTransformerSeq2Seq.from_preset("reinforced_proposed", src_vocab_size=100, tgt_vocab_size=120)
    m, width = 64, 128
    block = model.model.decoder.layers[0]
    assert model.model.encoder.layers[0].self_attn.q_proj.weight.shape == (4 * 64, width)  # W^Q: 2m → p·r
    assert block.self_attn.k_proj.weight.shape == (4 * 64, width)
    assert block.self_attn.v_proj.weight.shape == (4 * 64, m)  # W^V: m → p·q
    assert block.self_attn.out_proj.weight.shape == (width, 4 * 64)  # W^O: q·p → 2m
    assert block.cross_attn.k_proj.weight.shape == (4 * 64, width) and block.cross_attn.v_proj.weight.shape == (
        4 * 64,
        m,
    )
    assert block.ffn.fc1.weight.shape == (256, width) and block.norm2.normalized_shape == (width,)
    assert model.model.head.proj.weight.shape == (120, width) and model.model.head.proj.bias is not None
    assert (
        len(model.model.encoder.layers) == len(model.model.decoder.layers) == 2
        and model.model.encoder.final_norm is None
    )
    slots = model.embedding_slots()
    assert (
        slots["src"].embedding_dim == m and slots["tgt"].input_scale == 1.0 and slots["src"].positional_encoding is None
    )


def test_the_default_lr_is_the_noam_peak_of_the_models_own_width_and_warmup():
    def model(d_model=64, **optimizer):
        layers = {"num_encoder_layers": 1, "num_decoder_layers": 1, "d_model": d_model}
        return ReinforcedTransformerSeq2Seq(
            src_vocab_size=30, tgt_vocab_size=40, architecture=layers, optimizer=optimizer
        )

    assert model().hparams.optimizer["lr"] == noam_peak_lr(64, 4000)
    wide = model(128, warmup_steps=1000)
    assert wide.hparams.optimizer["lr"] == pytest.approx(128**-0.5 * 1000**-0.5)  # [R]: m^−½ · w^−½
    assert model(128, lr=3e-4).hparams.optimizer["lr"] == 3e-4
    optimizer = wide.configure_optimizers()["optimizer"]
    assert optimizer.param_groups[0]["initial_lr"] == wide.hparams.optimizer["lr"]
    with pytest.raises(ValueError, match=r"lr=None stands for \[R\]'s Noam peak"):
        model(lr_schedule="constant")


def test_first_block_input_is_normalized_tokens_next_to_positions():
    torch.manual_seed(0)
    model = tiny().eval()
    src = torch.tensor([[5, 6, 7, 3], [8, 3, 0, 0]])
    seen = {}
    model.model.encoder.layers[0].register_forward_hook(lambda mod, args, out: seen.setdefault("x", args[0]))
    model.model.encode(src)
    tn = token_normalize(model.model.src_embedding(src), src == 0)
    torch.testing.assert_close(seen["x"][..., :16], tn)
    torch.testing.assert_close(seen["x"][0, :, 16:], sinusoidal_encoding(4, 16, layout="half"))


@pytest.mark.parametrize("mode", ["sequence", "causal"])
def test_values_come_from_the_normalized_embeddings_in_every_attention(mode):
    torch.manual_seed(0)
    model = tiny(architecture={"target_normalization": mode}).eval()
    src, tgt = torch.randint(4, 30, (2, 6)), torch.randint(4, 40, (2, 5))
    src[1, 4:] = 0
    records = {}

    def record(name):
        return lambda mod, args, out: records.setdefault(name, []).append(args[0].detach().clone())

    for stack in ("encoder", "decoder"):
        for i, layer in enumerate(getattr(model.model, stack).layers):
            for kind in ("self_attn", "cross_attn"):
                attention = getattr(layer, kind)
                if attention is not None:
                    attention.v_proj.register_forward_hook(record(f"{stack}.{i}.{kind}.v"))
                    attention.register_forward_hook(  # what keys (and queries) are computed from
                        lambda mod, args, out, name=f"{stack}.{i}.{kind}.k": records.setdefault(name, []).append(
                            (args[0] if args[1] is None else args[1]).detach().clone()
                        )
                    )
    model(src, tgt)
    src_tn = token_normalize(model.model.src_embedding(src), src == 0)
    tgt_embedded = model.model.tgt_embedding(tgt)
    tgt_tn = token_normalize(tgt_embedded) if mode == "sequence" else causal_token_normalize(tgt_embedded)[0]
    for name, inputs in records.items():
        if name.endswith(".v"):
            expected = tgt_tn if name.startswith("decoder") and "self_attn" in name else src_tn
            torch.testing.assert_close(inputs[0], expected)
    baseline = {name: inputs[0] for name, inputs in records.items()}
    # perturb the output of the first encoder layer and the first decoder layer: keys move, values do not
    for stack in ("encoder", "decoder"):
        records.clear()
        handle = getattr(model.model, stack).layers[0].register_forward_hook(lambda mod, args, out: out + 1.0)
        model(src, tgt)
        handle.remove()
        for name, inputs in records.items():
            if name.endswith(".v"):
                torch.testing.assert_close(inputs[0], baseline[name])
        moved = [n for n in records if n.endswith(".k") and not torch.allclose(records[n][0], baseline[n])]
        assert f"{stack}.1.self_attn.k" in moved
        if stack == "encoder":
            assert {"decoder.0.cross_attn.k", "decoder.1.cross_attn.k"} <= set(moved)


def test_sequence_normalization_leaks_the_future_and_causal_does_not():
    torch.manual_seed(0)
    src, tgt = torch.randint(4, 30, (2, 6)), torch.randint(4, 40, (2, 8))
    changed = tgt.clone()
    changed[:, 6] = (changed[:, 6] + 11) % 36 + 4  # a later target token
    for mode, leaks in (("sequence", True), ("causal", False)):
        torch.manual_seed(0)
        model = tiny(architecture={"target_normalization": mode}).eval()
        earlier = model(src, tgt)[:, :6], model(src, changed)[:, :6]
        assert (not torch.allclose(*earlier, atol=1e-6)) == leaks, mode
    with pytest.raises(ValueError, match="cannot decode incrementally"):
        model = tiny(architecture={"target_normalization": "sequence"})
        model.model.decode(tgt, model.model.encode(src), cache=model.model.decoder.new_cache())
    assert model.model.new_cache() is None


def test_inputs_longer_than_max_len_fail_with_the_limit():
    model = tiny(architecture={"max_len": 8})
    with pytest.raises(ValueError, match="sequence length 9 exceeds max_len=8"):
        model.model.encode(torch.full((1, 9), 5))
    state = model.model.encode(torch.full((1, 4), 5))
    cache = model.model.new_cache()
    model.model.decode(torch.full((1, 8), 5), state, cache)
    with pytest.raises(ValueError, match="sequence length 9 exceeds max_len=8"):
        model.model.decode(torch.full((1, 1), 5), state, cache)


def test_checkpoint_reloads_and_translates_new_text_with_its_own_vocabularies(tmp_path):
    torch.manual_seed(0)
    data = multi30k_data(examples=16)
    options = settings(TINY_REINFORCED, optimizer={"lr": None, "lr_schedule": "noam", "warmup_steps": 2})
    model = ReinforcedTransformerSeq2Seq(**tokenizer_configs(data), **options)
    run = trainer(tmp_path, max_steps=2, limit_val_batches=0)
    run.fit(model, data)
    path = tmp_path / "reinforced.ckpt"
    run.save_checkpoint(path)
    loaded = ReinforcedTransformerSeq2Seq.load_from_checkpoint(path)
    assert loaded.src_tokenizer.to_config() == data.src_tokenizer.to_config()
    assert loaded.tgt_tokenizer.tokens == data.tgt_tokenizer.tokens
    assert loaded.hparams.optimizer["lr"] == noam_peak_lr(16, 2)  # the resolved number, not None
    new_text = multi30k_lines("test_2016_flickr", "de", 4, start=600)  # never seen in training
    model.eval()
    translations = loaded.translate(new_text, beam_size=2)
    assert translations == model.translate(new_text, beam_size=2) and all(isinstance(t, str) for t in translations)


def test_sequence_mode_warns_once_about_the_leak():
    import lightning_embinit.models.reinforced as reinforced

    reinforced._leak_warned = False
    with pytest.warns(UserWarning, match="leak the future"):
        tiny(architecture={"target_normalization": "sequence"})
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tiny(architecture={"target_normalization": "sequence"})
    with pytest.raises(ValueError, match="target_normalization"):
        tiny(architecture={"target_normalization": "global"})
    with pytest.raises(ValueError, match="concatenated"):
        tiny(architecture={"positional": "none"})


@pytest.mark.parametrize("mode", ["sequence", "causal"])
def test_adding_padding_changes_no_non_padding_logit(mode):
    torch.manual_seed(0)
    model = tiny(architecture={"target_normalization": mode}).eval()
    src = torch.tensor([[5, 6, 7, 3, 0], [8, 9, 3, 0, 0]])
    tgt = torch.tensor([[2, 11, 12, 13, 3], [2, 14, 3, 0, 0]])
    logits = model(src, tgt)
    wider = model(
        torch.cat((src, torch.zeros(2, 3, dtype=torch.long)), 1),
        torch.cat((tgt, torch.zeros(2, 2, dtype=torch.long)), 1),
    )
    real = tgt != 0
    torch.testing.assert_close(wider[:, :5][real], logits[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["sequence", "causal"])
def test_overfits_a_tiny_batch_of_real_sentences(mode):
    torch.manual_seed(0)
    de, en = multi30k_lines("train", "de", 4, start=10), multi30k_lines("train", "en", 4, start=10)
    src_tok, tgt_tok = TextTokenizer.word(de, min_freq=1), TextTokenizer.word(en, min_freq=1)
    model = ReinforcedTransformerSeq2Seq(
        src_tokenizer=src_tok,
        tgt_tokenizer=tgt_tok,
        **settings(TINY_REINFORCED, architecture={"d_model": 32, "target_normalization": mode}),
    )
    pad = torch.nn.utils.rnn.pad_sequence
    src = pad([torch.tensor(ids + [src_tok.eos_id]) for ids in src_tok.encode_batch(de)], True)
    tgt = pad([torch.tensor([tgt_tok.bos_id] + ids + [tgt_tok.eos_id]) for ids in tgt_tok.encode_batch(en)], True)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    for _ in range(150):
        loss, _ = model.teacher_forced_loss(src, tgt, label_smoothing=0.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05, f"{mode}: {loss.item():.3f}"
    if mode == "causal":  # no leak: the teacher-forced fit carries over to real decoding
        model.eval()
        assert model.translate(de) == [tgt_tok.decode(ids) for ids in tgt_tok.encode_batch(en)]
