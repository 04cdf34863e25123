"""TransformerSeq2Seq and the shared seq2seq machinery: shapes, masks, slots, loss, presets, stages, checkpoints."""

import math
from pathlib import Path

import pytest
import sacrebleu
import torch
import yaml
from lightning.pytorch.loggers import CSVLogger

from lightning_embinit import EmbeddingInitCallback
from lightning_embinit.init import EmbeddingHost
from lightning_embinit.models import (
    PRESETS,
    ReinforcedTransformerSeq2Seq,
    TransformerSeq2Seq,
    preset_arguments,
)
from lightning_embinit.models.optimization import noam_peak_lr
from lightning_embinit.text.tokenization import TextTokenizer
from tests.shared_data import require_shared_data
from tests.translation_helpers import (
    TINY,
    TINY_REINFORCED,
    multi30k_data,
    multi30k_lines,
    settings,
    tokenizer_configs,
    trainer,
)

MODELS = {"baseline": (TransformerSeq2Seq, TINY), "reinforced": (ReinforcedTransformerSeq2Seq, {})}
REPO = Path(__file__).resolve().parent.parent


def tiny(**options):
    return TransformerSeq2Seq(**settings(TINY, src_vocab_size=30, tgt_vocab_size=40, **options))


def test_shapes_and_the_causal_decoder():
    torch.manual_seed(0)
    model = tiny().eval()
    src, tgt = torch.randint(4, 30, (3, 7)), torch.randint(4, 40, (3, 9))
    logits = model(src, tgt)
    assert logits.shape == (3, 9, 40)
    changed = tgt.clone()
    changed[:, 5:] = (changed[:, 5:] + 7) % 36 + 4
    torch.testing.assert_close(model(src, changed)[:, :5], logits[:, :5])
    assert not torch.allclose(model(src, changed)[:, 5], logits[:, 5])
    changed_src = src.clone()
    changed_src[:, -1] = (changed_src[:, -1] + 3) % 26 + 4
    assert not torch.allclose(
        model(changed_src, tgt)[:, 0], logits[:, 0]
    )  # every target position sees the whole source


@pytest.mark.parametrize("pre_norm", [False, True])
def test_adding_padding_changes_no_non_padding_logit(pre_norm):
    torch.manual_seed(0)
    model = tiny(architecture={"pre_norm": pre_norm, "positional": "learned"}).eval()
    src = torch.tensor([[5, 6, 7, 3, 0], [8, 9, 3, 0, 0]])
    tgt = torch.tensor([[2, 11, 12, 13, 3], [2, 14, 3, 0, 0]])
    logits = model(src, tgt)
    wider_src = torch.cat((src, torch.zeros(2, 4, dtype=torch.long)), dim=1)
    wider_tgt = torch.cat((tgt, torch.zeros(2, 3, dtype=torch.long)), dim=1)
    wider = model(wider_src, wider_tgt)[:, :5]
    real = tgt != 0
    torch.testing.assert_close(wider[real], logits[real], rtol=1e-5, atol=1e-5)


def test_loss_ignores_padding_and_label_smoothing_is_the_standard_mix():
    torch.manual_seed(0)
    model = tiny(label_smoothing=0.1).eval()
    src, tgt = torch.randint(4, 30, (2, 6)), torch.randint(4, 40, (2, 8))
    tgt[1, 5:] = 0
    logits = model(src, tgt[:, :-1])
    targets = tgt[:, 1:]
    keep = targets != 0
    log_probs = logits[keep].log_softmax(-1)
    nll = -log_probs.gather(1, targets[keep][:, None]).mean()
    expected = 0.9 * nll - 0.1 * log_probs.mean(-1).mean()
    torch.testing.assert_close(model.loss(logits, targets), expected)
    loss, count = model.teacher_forced_loss(src, tgt, label_smoothing=0.1)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    assert count == keep.sum()
    full = tgt.clone()
    full[1, 5:] = 7  # no padding at all: the loss skips the gather
    loss, count = model.teacher_forced_loss(src, full, label_smoothing=0.1)
    torch.testing.assert_close(loss, model.loss(model(src, full[:, :-1]), full[:, 1:]), rtol=1e-5, atol=1e-5)
    assert count == full[:, 1:].numel()


def test_bad_settings_fail_before_any_weight_is_made():
    with pytest.raises(ValueError, match="src_tokenizer .* or src_vocab_size"):
        TransformerSeq2Seq(tgt_vocab_size=10)
    with pytest.raises(ValueError, match="output head"):
        tiny(architecture={"head": "tied_twice"})
    with pytest.raises(ValueError, match="one vocabulary for both sides"):
        tiny(architecture={"share_embeddings": True})
    with pytest.raises(ValueError, match="positional encoding"):
        tiny(architecture={"positional": "rotary"})
    with pytest.raises(ValueError, match="lr schedule"):
        tiny(optimizer={"lr_schedule": "cosine"})
    with pytest.raises(ValueError, match="beam_size"):
        tiny(beam_size=0)
    with pytest.raises(ValueError, match="^input_scale must be 'sqrt_d', 'inv_sqrt_d', 'none' or a number, got 'big'"):
        tiny(architecture={"input_scale": "big"})
    with pytest.raises(ValueError, match="unknown bleu_references 'detok'; choose one of: tokenizer, raw"):
        tiny(bleu_references="detok")
    with pytest.raises(ValueError, match=r"lr=None stands for \[R\]'s Noam peak .* lr_schedule='constant'"):
        tiny(optimizer={"lr": None})
    with pytest.raises(ValueError, match="token id 40 is outside"):
        tiny()(torch.tensor([[5, 3]]), torch.tensor([[2, 40]]))
    with pytest.raises(ValueError, match="unknown preset 'vaswani'; known presets: kim_multi30k"):
        TransformerSeq2Seq.from_preset("vaswani")
    with pytest.raises(ValueError, match="ReinforcedTransformerSeq2Seq.from_preset"):
        TransformerSeq2Seq.from_preset("reinforced_proposed")


def test_presets_follow_spec_and_match_the_example_configs():
    model = TransformerSeq2Seq.from_preset("reinforced_baseline", src_vocab_size=100, tgt_vocab_size=100)
    arch, opt = model.hparams.architecture, model.hparams.optimizer
    sizes = ("num_encoder_layers", "num_decoder_layers", "d_model", "ffn_dim", "num_heads")
    assert [arch[name] for name in sizes] == [4, 4, 128, 512, 8]
    assert model.model.encoder.layers[0].self_attn.q_proj.weight.shape == (8 * 128, 128)  # r = q = m = 128 per head
    assert model.model.decoder.layers[0].self_attn.out_proj.weight.shape == (128, 8 * 128)
    assert model.model.src_input.positional.layout == "half" and opt["lr_schedule"] == "noam"
    assert opt["warmup_steps"] == 4000 and opt["lr"] == pytest.approx(128**-0.5 * 4000**-0.5) == noam_peak_lr(128, 4000)
    kim = TransformerSeq2Seq.from_preset(
        "kim_multi30k", src_vocab_size=100, tgt_vocab_size=100, architecture={"d_model": 300}
    )
    arch = kim.hparams.architecture
    assert (arch["num_heads"], arch["ffn_dim"], kim.hparams.optimizer["lr"], arch["dropout"]) == (10, 1200, 2e-4, 0.1)
    assert kim.model.encoder.final_norm is None and len(kim.model.decoder.layers) == 3  # post-LN, 3 + 3
    assert preset_arguments("kim_multi30k")[1]["architecture"]["num_heads"] == 8
    proposed = ReinforcedTransformerSeq2Seq.from_preset("reinforced_proposed", src_vocab_size=100, tgt_vocab_size=100)
    assert [proposed.hparams.architecture[name] for name in ("d_model", "ffn_dim", "num_heads")] == [64, 256, 4]
    # overrides recompute what [R] derives from them: r = q = m and the Noam peak m^−½·w^−½
    for name, d, warmup in (("reinforced_baseline", 64, 4000), ("reinforced_proposed", 128, 1000)):
        arguments = preset_arguments(name, architecture={"d_model": d}, optimizer={"warmup_steps": warmup})[1]
        assert (arguments["architecture"]["qk_head_dim"], arguments["architecture"]["v_head_dim"]) == (d, d)
        assert arguments["optimizer"]["lr"] == pytest.approx(d**-0.5 * warmup**-0.5)
    explicit = preset_arguments("reinforced_proposed", architecture={"d_model": 128}, optimizer={"lr": 1e-3})[1]
    assert explicit["optimizer"]["lr"] == 1e-3  # an explicit lr wins
    for name in ("kim_multi30k", "reinforced_baseline", "reinforced_proposed"):
        assert name in PRESETS
        config = yaml.safe_load((REPO / "examples" / "configs" / f"{name}.yaml").read_text())
        cls, arguments = preset_arguments(name)
        assert config["model"]["class_path"] == f"{cls.__module__.rsplit('.', 1)[0]}.{cls.__name__}"
        for group in ("architecture", "optimizer"):
            given = config["model"]["init_args"][group]
            for key, value in arguments[group].items():
                expected = list(value) if isinstance(value, tuple) else value
                assert given.get(key) == pytest.approx(expected), f"{name}.yaml: {group}.{key}"
        assert config["data"]["class_path"] == "lightning_embinit.data.TranslationDataModule"


def test_slots_name_each_side_with_its_tokens_scale_and_positions():
    src_tok = TextTokenizer.word(multi30k_lines("train", "de", 50), min_freq=1)
    tgt_tok = TextTokenizer.word(multi30k_lines("train", "en", 50), min_freq=1)
    model = TransformerSeq2Seq(
        src_tokenizer=src_tok.to_config(),
        tgt_tokenizer=tgt_tok,
        **settings(TINY, architecture={"positional": "half", "input_scale": 2.0}),
    )
    assert isinstance(model, EmbeddingHost) and model.hparams.tgt_tokenizer == tgt_tok.to_config()
    slots = model.embedding_slots()
    assert list(slots) == ["src", "tgt"]
    assert list(slots["src"].tokens) == src_tok.tokens and list(slots["tgt"].tokens) == tgt_tok.tokens
    assert slots["tgt"].special_tokens == tgt_tok.special_tokens and slots["src"].padding_idx == src_tok.pad_id
    assert slots["src"].input_scale == 2.0 and slots["tgt"].tied_modules == ()
    torch.testing.assert_close(slots["tgt"].positional_encoding(), model.model.tgt_input.positional.encoding())
    assert model.model.src_input.embedding.weight[src_tok.pad_id].abs().max() == 0
    joint = TextTokenizer.word(multi30k_lines("train", "de", 50) + multi30k_lines("train", "en", 50), min_freq=1)
    shared = TransformerSeq2Seq(
        src_tokenizer=joint.to_config(),
        tgt_tokenizer=joint.to_config(),
        **settings(TINY, architecture={"share_embeddings": True, "head": "tied"}),
    )
    (slot,) = shared.embedding_slots().values()
    assert slot.name == "shared" and slot.tied_modules == ("model.head",) and len(slot.tokens) == len(joint)
    assert shared.model.src_input.embedding is shared.model.tgt_input.embedding
    assert sum(p.numel() for p in shared.parameters()) < sum(p.numel() for p in model.parameters())


def test_embedding_init_callback_fills_src_and_tgt_from_their_own_files_with_no_glue(tmp_path):
    glove = require_shared_data("glove", "glove.6B.50d.multi30k_subset.txt.gz")
    german = {"ein": 0.1, "mann": -0.2, "frau": 0.3, "hund": 0.05}
    vectors = tmp_path / "vectors.de.txt"
    torch.manual_seed(0)
    rows = {word: torch.randn(50) + shift for word, shift in german.items()}
    vectors.write_text("".join(f"{w} {' '.join(f'{x:.6f}' for x in v.tolist())}\n" for w, v in rows.items()))
    data = multi30k_data(examples=200)
    model = TransformerSeq2Seq(
        **tokenizer_configs(data), **settings(TINY, architecture={"d_model": 50, "num_heads": 5}, optimizer={"lr": 0.0})
    )
    callback = EmbeddingInitCallback(
        slots={"src": {"source": f"file:{vectors}"}, "tgt": {"source": f"file:{glove}"}},
        standardize="xavier",
        seed=0,
        verbose=False,
    )
    trainer(tmp_path, max_steps=1, callbacks=[callback], limit_val_batches=0).fit(model, data)
    src_ids = {w: data.src_tokenizer.tokens.index(w) for w in german}
    table = model.model.src_input.embedding.weight.detach()
    ratios = (table[src_ids["ein"]] - table[src_ids["mann"]]) / (rows["ein"] - rows["mann"])
    torch.testing.assert_close(
        ratios, ratios.mean().expand(50), rtol=1e-3, atol=1e-4
    )  # an affine map of the file's rows
    import gzip

    with gzip.open(glove, "rt") as handle:
        next(handle)
        glove_rows = {p[0]: torch.tensor([float(x) for x in p[1:]]) for p in (line.split() for line in handle)}
    tgt_ids = {w: data.tgt_tokenizer.tokens.index(w) for w in ("dog", "man", "woman")}
    table = model.model.tgt_input.embedding.weight.detach()
    ratios = (table[tgt_ids["dog"]] - table[tgt_ids["man"]]) / (glove_rows["dog"] - glove_rows["man"])
    torch.testing.assert_close(ratios, ratios.mean().expand(50), rtol=1e-3, atol=1e-4)
    scale = ratios.mean().item()
    assert 0 < scale < 1 and abs(table[4:].std().item() - math.sqrt(2 / (len(data.tgt_tokenizer) + 50))) < 0.01


@pytest.mark.parametrize("name", ["baseline", "reinforced"])
def test_validate_fit_validate_test_with_bleu_equal_to_sacrebleu(tmp_path, name):
    torch.manual_seed(0)
    data = multi30k_data(examples=48)
    cls, options = (TransformerSeq2Seq, TINY) if name == "baseline" else (ReinforcedTransformerSeq2Seq, TINY_REINFORCED)
    model = cls(
        **tokenizer_configs(data),
        **settings(options, optimizer={"lr": 3e-3, "lr_schedule": "constant"}, bleu_every_n_validations=2),
    )
    logger = CSVLogger(tmp_path)  # a logger merges the model's and the datamodule's hyperparameters
    run = trainer(
        tmp_path, max_steps=4, val_check_interval=1, check_val_every_n_epoch=None, limit_val_batches=1, logger=logger
    )
    first = run.validate(model, data, verbose=False)[0]
    assert {"val_loss", "val_ppl", "val_bleu"} <= set(first)
    run.fit(model, data)
    assert model._validation_runs == 4  # BLEU on runs 2 and 4 only
    logged = yaml.unsafe_load(Path(logger.log_dir, "hparams.yaml").read_text())  # our own file (tuples)
    assert logged["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")
    assert logged["bleu_references"] == "tokenizer round-trip (word, lowercased)"
    assert logged["src_tokenizer"] == "word"  # the datamodule's spec
    assert logged["architecture"]["d_model"] == options["architecture"]["d_model"]
    assert model.hparams.src_tokenizer == data.src_tokenizer_config  # the model's config, in the checkpoint
    after = trainer(tmp_path).validate(model, data, verbose=False)[0]
    assert after["val_loss"] < first["val_loss"]
    assert after["val_ppl"] == pytest.approx(math.exp(after["val_loss"]), rel=1e-4)
    sources, targets = data.split_texts("val")
    hypotheses = model.translate(sources)
    expected = sacrebleu.corpus_bleu(hypotheses, [data.reference_texts("val")]).score
    assert after["val_bleu"] == pytest.approx(expected, abs=1e-4)
    tested = trainer(tmp_path).test(model, data, verbose=False)[0]
    assert {"test_loss", "test_ppl", "test_bleu"} <= set(tested) and math.isfinite(tested["test_loss"])
    predictions = trainer(tmp_path).predict(model, data)
    assert isinstance(predictions[0][0]["translation"], str)


def test_every_run_logs_the_bleu_signature_and_raw_references_are_the_data_text(tmp_path):
    torch.manual_seed(0)
    data = multi30k_data(examples=16)
    model = TransformerSeq2Seq(**tokenizer_configs(data), **TINY, bleu_references="raw")
    scored = []
    update = model.val_bleu.update
    model.val_bleu.update = lambda hypotheses, references: (scored.extend(references), update(hypotheses, references))
    loggers = [CSVLogger(tmp_path, name=name) for name in ("validate", "fit")]
    trainer(tmp_path, logger=loggers[0]).validate(model, data, verbose=False)
    trainer(tmp_path, max_steps=1, val_check_interval=1, check_val_every_n_epoch=None, logger=loggers[1]).fit(
        model, data
    )
    for logger in loggers:  # one model, two runs with their own loggers: each gets the signature
        logged = yaml.unsafe_load(Path(logger.log_dir, "hparams.yaml").read_text())
        assert (
            logged["bleu_signature"].startswith("nrefs:1|case:mixed") and logged["bleu_references"] == "raw target text"
        )
    raw = data.split_texts("val")[1]
    assert len(scored) == 2 * len(raw) and set(scored) == set(raw)  # the data's text, not the tokenizer's round trip
    assert set(scored).isdisjoint(data.reference_texts("val"))  # (which lowercases: "A man" → "a man")


def test_checkpoint_reloads_and_translates_new_text_with_its_own_vocabularies(tmp_path):
    torch.manual_seed(0)
    data = multi30k_data(examples=32)
    model = TransformerSeq2Seq(**tokenizer_configs(data), **TINY, optimizer={"lr": 3e-3})
    run = trainer(tmp_path, max_steps=3, limit_val_batches=0)
    run.fit(model, data)
    path = tmp_path / "model.ckpt"
    run.save_checkpoint(path)
    loaded = TransformerSeq2Seq.load_from_checkpoint(path)
    assert loaded.src_tokenizer.tokens == data.src_tokenizer.tokens
    assert loaded.tgt_tokenizer.to_config() == data.tgt_tokenizer.to_config()
    new_text = multi30k_lines("test_2016_flickr", "de", 5, start=500)  # never seen in training
    model.eval()
    assert loaded.translate(new_text, beam_size=2) == model.translate(new_text, beam_size=2)
    assert all(isinstance(t, str) for t in loaded.translate(new_text))
    with pytest.raises(ValueError, match="translate\\(\\) needs"):
        tiny().translate(["ein hund"])


@pytest.mark.parametrize("name", ["baseline", "reinforced"])
def test_bf16_autocast_on_cpu_gives_finite_losses(name):
    torch.manual_seed(0)
    cls, options = MODELS[name]
    model = cls(src_vocab_size=30, tgt_vocab_size=40, **options)
    src, tgt = torch.randint(4, 30, (4, 7)), torch.randint(4, 40, (4, 9))
    tgt[0, 6:] = 0
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = model.teacher_forced_loss(src, tgt, label_smoothing=0.1)
        logits = model(src, tgt[:, :-1])
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    optimizer.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    model.eval()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.generate(src, max_len=5).shape[0] == 4


def test_overfits_a_tiny_batch_of_real_sentences():
    torch.manual_seed(0)
    de, en = multi30k_lines("train", "de", 4), multi30k_lines("train", "en", 4)
    src_tok, tgt_tok = TextTokenizer.word(de, min_freq=1), TextTokenizer.word(en, min_freq=1)
    model = TransformerSeq2Seq(src_tokenizer=src_tok, tgt_tokenizer=tgt_tok, **TINY)
    src = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(ids + [src_tok.eos_id]) for ids in src_tok.encode_batch(de)], True
    )
    tgt = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor([tgt_tok.bos_id] + ids + [tgt_tok.eos_id]) for ids in tgt_tok.encode_batch(en)], True
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    for _ in range(120):
        loss, _ = model.teacher_forced_loss(src, tgt, label_smoothing=0.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05
    model.eval()
    assert model.translate(de) == [tgt_tok.decode(ids) for ids in tgt_tok.encode_batch(en)]
