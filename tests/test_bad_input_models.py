"""Bad input to the models, decoding, checkpoints, lexical probes and ``embinit inspect`` (issue 17): never a
silent wrong result, and every error names the argument, the file or the class."""

from __future__ import annotations

import struct
import zipfile

import lightning as L
import pytest
import torch

from lightning_embinit.architectures import EncoderClassifierConfig, ReinforcedEncoderDecoderConfig
from lightning_embinit.commands.inspect import main as inspect_main
from lightning_embinit.diagnostics import lexical_probe
from lightning_embinit.init.sources import SourceRequest, resolve_source
from lightning_embinit.models import (
    ReinforcedTransformerSeq2Seq,
    TransformerClassifier,
    TransformerSeq2Seq,
)
from lightning_embinit.models.optimization import OptimizerConfig
from lightning_embinit.text.tokenization import TextTokenizer
from tests.translation_helpers import settings

SENTENCES = ["a dog runs .", "the cat sleeps .", "a dog sleeps .", "the cat runs ."]
SMALL = {
    "architecture": {
        "d_model": 8,
        "num_heads": 2,
        "num_encoder_layers": 1,
        "num_decoder_layers": 1,
        "ffn_dim": 8,
        "max_len": 16,
    }
}


def small_seq2seq(option: str, value) -> TransformerSeq2Seq:
    """A small TransformerSeq2Seq with ``option`` (``group.field`` or the system's own argument) set to ``value``."""
    group, _, name = option.rpartition(".")
    return TransformerSeq2Seq(
        src_vocab_size=12, tgt_vocab_size=12, **settings(SMALL, **({group: {name: value}} if group else {name: value}))
    )


@pytest.fixture(scope="module")
def tokenizer():
    return TextTokenizer.word(SENTENCES, min_freq=1).to_config()


@pytest.fixture(scope="module")
def seq2seq(tokenizer):
    return TransformerSeq2Seq(src_tokenizer=tokenizer, tgt_tokenizer=tokenizer, **SMALL)


# ---------------------------------------------------------------------------------------------- construction
@pytest.mark.parametrize(
    "option, value, message",
    [
        ("architecture.dropout", 1.0, r"dropout must be in \[0, 1\), got 1.0"),
        ("architecture.attention_dropout", 2, r"attention_dropout must be in \[0, 1\) or None, got 2"),
        ("architecture.activation_dropout", -0.1, r"activation_dropout must be in \[0, 1\) or None, got -0.1"),
        ("architecture.ffn_dim", 0, r"ffn_dim must be ≥ 1 or None, got 0"),
        ("architecture.qk_head_dim", 0, r"qk_head_dim must be ≥ 1 or None, got 0"),
        ("architecture.num_encoder_layers", 0, r"num_encoder_layers must be ≥ 1, got 0"),
        ("label_smoothing", 1.0, r"label_smoothing must be in \[0, 1\), got 1.0"),
        ("optimizer.lr", -1e-3, r"lr must be in \[0, ∞\) or None, got -0.001"),
    ],
)
def test_probabilities_and_sizes_are_checked_at_construction(option, value, message):
    with pytest.raises(ValueError, match=message):
        small_seq2seq(option, value)


def test_shape_errors_name_what_the_user_typed():
    with pytest.raises(
        ValueError,
        match=r"the layer width 2 · d_model = 20 \(d_model=10\) is not divisible by num_heads=3: "
        r"change d_model or num_heads, or give qk_head_dim and v_head_dim",
    ):
        ReinforcedTransformerSeq2Seq(
            src_vocab_size=12,
            tgt_vocab_size=12,
            architecture={"d_model": 10, "num_heads": 3, "qk_head_dim": None, "v_head_dim": None},
        )
    with pytest.raises(ValueError, match=r"^d_model=10 is not divisible by num_heads=3: change d_model or num_heads$"):
        EncoderClassifierConfig(d_model=10, num_heads=3)
    for option, message in (
        ("d_model", r"d_model must be ≥ 1, got 0"),
        ("max_len", r"max_len must be ≥ 1, got 0"),
        ("num_heads", r"num_heads must be ≥ 1, got 0"),
        ("tn_eps", r"tn_eps must be in \(0, ∞\), got 0"),
    ):
        with pytest.raises(ValueError, match=message):
            ReinforcedEncoderDecoderConfig(**{option: 0})
    with pytest.raises(ValueError, match=r"betas\[1\] must be in \[0, 1\), got 1.5"):
        OptimizerConfig(betas=(0.9, 1.5))
    with pytest.raises(ValueError, match=r"^d_model must be ≥ 1, got 0$"):  # the preset's Noam peak divided by 0
        ReinforcedTransformerSeq2Seq.from_preset(
            "reinforced_proposed", src_vocab_size=12, tgt_vocab_size=12, architecture={"d_model": 0}
        )
    with pytest.raises(ValueError, match=r"^num_heads must be ≥ 1, got 0$"):  # not [K]'s 8 heads instead
        TransformerClassifier.from_preset("kim_sst2", vocab_size=12, num_classes=2, architecture={"num_heads": 0})


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("beam_size", 0, r"beam_size must be ≥ 1, got 0"),
        ("length_penalty", float("nan"), r"length_penalty must be a finite number, got nan"),
        ("max_decode_len", 0, r"max_decode_len must be ≥ 1 or None, got 0"),
    ],
)
def test_decoding_options_are_checked_at_construction(option, value, message):
    with pytest.raises(ValueError, match=message):
        small_seq2seq(option, value)


# ---------------------------------------------------------------------------------------------- calls
def test_decoding_options_are_checked_where_they_are_given(seq2seq):
    src = torch.tensor([[4, 5, 3]])
    for options, message in [
        ({"beam_size": 0}, r"beam_size must be ≥ 1 or None, got 0"),
        ({"max_len": 0}, r"max_len must be ≥ 1 or None, got 0"),
        ({"length_penalty": float("nan")}, r"length_penalty must be a finite number or None, got nan"),
    ]:
        with pytest.raises(ValueError, match=message):
            seq2seq.generate(src, **options)
        with pytest.raises(ValueError, match=message):
            seq2seq.translate(["a dog"], **options)
    assert seq2seq.generate(src, max_len=2).shape[1] <= 2


def test_a_bare_string_is_no_list_of_sentences(seq2seq, tokenizer):
    with pytest.raises(
        TypeError, match=r"translate\(\) texts must be a list of strings, got a single str .*pass \[text\]"
    ):
        seq2seq.translate("a dog runs .")
    for item, type_name in ((None, "NoneType"), (5, "int")):
        with pytest.raises(TypeError, match=rf"translate\(\) texts\[1\] must be a string, got {type_name}"):
            seq2seq.translate(["a dog", item])
    classifier = TransformerClassifier(
        tokenizer=tokenizer,
        num_classes=2,
        architecture={"d_model": 8, "num_heads": 2, "num_layers": 1, "ffn_dim": 8, "max_len": 16},
    )
    with pytest.raises(TypeError, match=r"classify\(\) texts must be a list of strings, got a single str"):
        classifier.classify("a dog runs .")
    with pytest.raises(TypeError, match=r"classify\(\) pairs\[0\] must be a string, got NoneType"):
        classifier.classify(["a dog"], [None])
    assert len(seq2seq.translate(["a dog runs ."])) == 1


@pytest.mark.parametrize("model_class", [TransformerSeq2Seq, ReinforcedTransformerSeq2Seq])
def test_source_and_target_batches_of_different_sizes(model_class):
    model = model_class(src_vocab_size=12, tgt_vocab_size=12, **SMALL)
    src = torch.tensor([[4, 5, 3], [6, 7, 3]])
    for rows in (1, 3):
        with pytest.raises(
            ValueError,
            match=rf"the target batch \({rows}, 3\) must be \(B, T\) with one row per source row; "
            r"the source batch has B = 2 rows",
        ):
            model(src, torch.full((rows, 3), 4))
    assert model(src, torch.full((2, 3), 4)).shape == (2, 3, 12)


# ---------------------------------------------------------------------------------------------- checkpoints
def save(model: L.LightningModule, path) -> str:
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.strategy.connect(model)
    trainer.save_checkpoint(path)
    return str(path)


def flip_a_tensor_byte(path) -> None:
    """Change one byte inside a stored tensor, leaving the zip archive's structure (and its CRC record) alone."""
    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    data = bytearray(open(path, "rb").read())
    name_length, extra_length = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    data[info.header_offset + 30 + name_length + extra_length + 4] ^= 0x40
    open(path, "wb").write(bytes(data))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, seq2seq):
    directory = tmp_path_factory.mktemp("checkpoints")
    classifier = TransformerClassifier(
        vocab_size=12,
        num_classes=2,
        architecture={"d_model": 8, "num_heads": 2, "num_layers": 1, "ffn_dim": 8, "max_len": 16},
    )
    return {
        "seq2seq": save(seq2seq, directory / "seq2seq.ckpt"),
        "classifier": save(classifier, directory / "classifier.ckpt"),
    }


def test_a_checkpoint_with_flipped_bytes_is_refused(checkpoints, tmp_path):
    damaged = tmp_path / "damaged.ckpt"
    damaged.write_bytes(open(checkpoints["seq2seq"], "rb").read())
    flip_a_tensor_byte(damaged)
    message = rf"{damaged} is damaged: '.*/data/\d+' inside it fails its CRC check"
    with pytest.raises(ValueError, match=message):
        TransformerSeq2Seq.load_from_checkpoint(damaged)
    with pytest.raises(ValueError, match=message):
        resolve_source(
            f"checkpoint:{damaged}", parameter="model.src_input.embedding.weight", tokens=[f"t{k}" for k in range(12)]
        ).build(
            SourceRequest("src", 12, 8, tokens=[f"t{k}" for k in range(12)], generator=torch.Generator().manual_seed(0))
        )
    from lightning_embinit.commands.lightning_cli import EmbinitCLI

    cli = EmbinitCLI.__new__(EmbinitCLI)
    cli.config = {"subcommand": "validate", "validate": {"ckpt_path": str(damaged)}}
    with pytest.raises(ValueError, match=rf"--ckpt_path {damaged} is damaged"):
        cli._parse_ckpt_path()


def test_truncated_and_foreign_files_are_named(checkpoints, tmp_path):
    data = open(checkpoints["seq2seq"], "rb").read()
    (tmp_path / "truncated.ckpt").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=rf"checkpoint {tmp_path / 'truncated.ckpt'} is truncated or damaged"):
        TransformerSeq2Seq.load_from_checkpoint(tmp_path / "truncated.ckpt")
    (tmp_path / "notes.ckpt").write_text("hello\n", encoding="utf-8")
    with pytest.raises(
        ValueError, match=rf"checkpoint {tmp_path / 'notes.ckpt'} cannot be loaded: .* is it a checkpoint at all\?"
    ):
        TransformerSeq2Seq.load_from_checkpoint(tmp_path / "notes.ckpt")
    (tmp_path / "empty.ckpt").write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty.ckpt is empty \(0 bytes\)"):
        TransformerSeq2Seq.load_from_checkpoint(tmp_path / "empty.ckpt")


def test_a_checkpoint_loaded_as_another_class_names_the_class_that_saved_it(checkpoints):
    with pytest.raises(
        ValueError,
        match=r"was saved by TransformerClassifier, not by TransformerSeq2Seq: load it with "
        r"TransformerClassifier.load_from_checkpoint",
    ):
        TransformerSeq2Seq.load_from_checkpoint(checkpoints["classifier"])
    with pytest.raises(ValueError, match=r"was saved by TransformerSeq2Seq, not by ReinforcedTransformerSeq2Seq"):
        ReinforcedTransformerSeq2Seq.load_from_checkpoint(checkpoints["seq2seq"])
    checkpoint = torch.load(checkpoints["seq2seq"], weights_only=True)
    del checkpoint["embinit_class"]  # a checkpoint that records no class loads unchecked
    torch.save(checkpoint, checkpoints["seq2seq"] + ".unnamed")
    assert TransformerSeq2Seq.load_from_checkpoint(checkpoints["seq2seq"] + ".unnamed").translate(["a dog"])


# ---------------------------------------------------------------------------------------------- lexical probes
TOKENS = ["man", "woman", "king", "queen", "boy", "girl"]


def test_lexical_probe_refuses_non_finite_rows(tmp_path):
    analogies = tmp_path / "questions.txt"
    analogies.write_text(": family\nman woman king queen\nboy girl man woman\n", encoding="utf-8")
    table = torch.randn(6, 4)
    table[2, 1] = float("nan")
    with pytest.raises(ValueError, match=r"the table has 1 of 6 rows with NaN or infinite values \(row 2 \('king'\)\)"):
        lexical_probe(table, TOKENS, analogies=analogies, chains=["raw"])
    with pytest.raises(ValueError, match=r"6 of 6 rows"):
        lexical_probe(torch.full((6, 4), float("nan")), TOKENS, analogies=analogies, chains=["raw"])


@pytest.mark.parametrize("max_analogies", [None, 2000])
def test_a_malformed_analogy_file_is_an_error_with_or_without_sampling(tmp_path, max_analogies):
    headless = tmp_path / "headless.txt"
    headless.write_text("man woman king queen\nboy girl man woman\n", encoding="utf-8")
    with pytest.raises(
        ValueError, match=rf"analogy file {headless}, line 1: 'man woman king queen' comes before any ': <section>'"
    ):
        lexical_probe(torch.randn(6, 4), TOKENS, analogies=headless, chains=["raw"], max_analogies=max_analogies)
    empty = tmp_path / "empty.txt"
    empty.write_text(": family\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"analogy file {empty} has no question"):
        lexical_probe(torch.randn(6, 4), TOKENS, analogies=empty, chains=["raw"], max_analogies=max_analogies)


def test_question_and_similarity_files_that_cannot_be_read_are_named(tmp_path):
    latin = tmp_path / "latin.txt"
    latin.write_bytes(": family\nman woman king queen\nboy girl man woman\ngarçon fille man woman\n".encode("latin-1"))
    with pytest.raises(ValueError, match=rf"analogy file {latin} is not valid utf-8 text .*encoding="):
        lexical_probe(torch.randn(6, 4), TOKENS, analogies=latin, chains=["raw"])
    assert (
        lexical_probe(torch.randn(6, 4), TOKENS, analogies=latin, chains=["raw"], encoding="latin-1")["raw"][
            "analogy_count"
        ]
        == 2
    )
    fake_gz = tmp_path / "questions.txt.gz"
    fake_gz.write_bytes(latin.read_bytes())
    with pytest.raises(ValueError, match=rf"analogy file {fake_gz} is not a complete gzip file"):
        lexical_probe(torch.randn(6, 4), TOKENS, analogies=fake_gz, chains=["raw"])
    commas = tmp_path / "pairs.csv"
    commas.write_text("man,woman,5.0\nking,queen,6.0\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"word-similarity file {commas} has no 'word1<TAB>word2<TAB>rating' line"):
        lexical_probe(torch.randn(6, 4), TOKENS, similarity=[commas], chains=["raw"])
    mac = tmp_path / "mac.tsv"
    mac.write_bytes(b"man\twoman\t5.0\rking\tqueen\t6.0\rboy\tgirl\t4.0\r")
    assert lexical_probe(torch.randn(6, 4), TOKENS, similarity=[mac], chains=["raw"])["raw"]["similarity_count"] == {
        "mac": 3
    }


# ---------------------------------------------------------------------------------------------- embinit inspect
def test_inspect_names_the_option_of_a_bad_size(capsys):
    with pytest.raises(SystemExit) as exit_info:
        inspect_main(["--vocab-size", "10", "--dim", "-4"])
    assert exit_info.value.code == 2
    assert "argument --dim: expected an integer ≥ 1, got '-4'" in capsys.readouterr().err
    assert inspect_main(["--vocab-size", "10", "--dim", "4", "--padding-idx", "12"]) == 2
    assert "--padding-idx 12 is not a row of the table's 10 rows (0 … 9)" in capsys.readouterr().err
