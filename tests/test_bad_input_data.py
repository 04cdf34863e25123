"""Bad input to the data readers, datamodule options and tokenizers (issue 17): never a silent wrong result, and
every error names the file, the argument or the fix."""

from __future__ import annotations

import gzip
import json

import pytest

from lightning_embinit.data import ClassificationDataModule, TranslationDataModule
from lightning_embinit.text.tokenization import TextTokenizer, build_tokenizer

SENTENCES = ["a dog runs .", "the cat sleeps .", "a dog sleeps .", "the cat runs ."]


def classification(tmp_path, name: str, text: str, **options) -> ClassificationDataModule:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8", newline="")
    return ClassificationDataModule(train_file=str(path), **{"min_freq": 1, "cache": False, **options})


def tsv(labels) -> str:
    return "sentence\tlabel\n" + "".join(f"{SENTENCES[k % 4]}\t{label}\n" for k, label in enumerate(labels))


def jsonl(rows) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


# ---------------------------------------------------------------------------------------------- labels
@pytest.mark.parametrize(
    "name, text, lines",
    ids=["empty-tsv", "nan-csv", "absent-jsonl"],
    argvalues=[
        ("empty.tsv", tsv([0, 1, 0, "", 1, ""]), r"lines \[5, 7\]"),
        (
            "nan.csv",
            "sentence,label\n" + "".join(f"s {k},{v}\n" for k, v in enumerate([0, 1, "NaN", 1])) + 'x,"  "\n',
            r"lines \[4, 6\]",
        ),
        (
            "absent.jsonl",
            jsonl(
                [
                    {"sentence": "a", "label": 0},
                    {"sentence": "b", "label": 1},
                    {"sentence": "c"},
                    {"sentence": "d", "label": None},
                ]
            ),
            r"lines \[3, 4\]",
        ),
    ],
)
def test_missing_labels_are_an_error_naming_the_file_and_the_lines(tmp_path, name, text, lines):
    with pytest.raises(ValueError, match=rf"train \(.*{name}\), column 'label': 2 of \d rows have no label .*{lines}"):
        classification(tmp_path, name, text).label_names


def test_labels_equal_as_numbers_are_one_class(tmp_path):
    rows = [{"sentence": SENTENCES[k % 4], "label": label} for k, label in enumerate([1, 1.0, "1", 0, "0.0", 1])]
    data = classification(tmp_path, "mixed.jsonl", jsonl(rows))
    assert data.label_names == ["0", "1"]
    assert data.split_texts("train")[2].tolist() == [1, 1, 1, 0, 0, 1]
    assert classification(tmp_path, "floats.tsv", tsv(["1", "1.0", "0", "2.0"])).label_names == ["0", "1", "2"]


def test_given_label_names_are_the_only_source_of_truth(tmp_path):
    data = classification(tmp_path, "named.tsv", tsv(["pos", "neg", "1.0", 0]), label_names=["neg", "pos"])
    assert data.label_names == ["neg", "pos"] and data.split_texts("train")[2].tolist() == [1, 0, 1, 0]
    stars = classification(tmp_path, "stars.tsv", tsv(["1", "2.0", "2"]), label_names=["1", "2"])
    assert stars.split_texts("train")[2].tolist() == [0, 1, 1]  # names that are numbers match as numbers
    with pytest.raises(
        ValueError, match=r"unknown label values \['0'\]; known labels: \['1', '2'\] \(a label is one of these names\)"
    ):
        classification(tmp_path, "zero.tsv", tsv(["1", "0"]), label_names=["1", "2"]).label_names  # not index 0


# ---------------------------------------------------------------------------------------------- files
def test_lone_carriage_returns_end_lines(tmp_path):
    src, tgt = tmp_path / "mac.de", tmp_path / "mac.en"
    src.write_bytes("".join(f"ein hund {k}\r" for k in range(36)).encode())
    tgt.write_bytes("".join(f"a dog {k}\r" for k in range(36)).encode())
    data = TranslationDataModule(train_files=[str(src), str(tgt)], min_freq=1, cache=False)
    texts, targets = data.split_texts("train")
    assert len(texts) == 36 and texts[35] == "ein hund 35" and targets[0] == "a dog 0"
    table = classification(tmp_path, "mac.tsv", tsv([0, 1, 0, 1]).replace("\n", "\r"))
    assert table.split_texts("train")[0] == SENTENCES


@pytest.mark.parametrize("kind", ["translation", "classification"])
def test_text_in_another_encoding_names_the_file_and_encoding(tmp_path, kind):
    if kind == "translation":
        src, tgt = tmp_path / "t.de", tmp_path / "t.en"
        src.write_bytes("über den fluss\nein hund\n".encode("latin-1"))
        tgt.write_text("over the river\na dog\n", encoding="utf-8")

        def make(**options):
            return TranslationDataModule(train_files=[str(src), str(tgt)], min_freq=1, cache=False, **options)

        bad, read = src, lambda data: data.split_texts("train")[0][0]
    else:
        bad = tmp_path / "t.tsv"
        bad.write_bytes("sentence\tlabel\nsehr schön\t1\nschlecht\t0\n".encode("latin-1"))

        def make(**options):
            return ClassificationDataModule(train_file=str(bad), min_freq=1, cache=False, **options)

        read = lambda data: data.split_texts("train")[0][0]  # noqa: E731
    with pytest.raises(ValueError, match=rf"{bad} is not valid utf-8 text .*encoding="):
        make().raw_splits
    assert read(make(encoding="latin-1")) in ("über den fluss", "sehr schön")
    with pytest.raises(ValueError, match="encoding='klingon' is not a text encoding"):
        make(encoding="klingon")


@pytest.mark.parametrize("content", [b"not gzip at all\n", "truncated"], ids=["not-gzip", "truncated"])
def test_a_gz_file_that_is_not_gzip_names_the_file(tmp_path, content):
    path = tmp_path / "train.tsv.gz"
    if content == "truncated":
        content = gzip.compress(tsv([0, 1, 0, 1] * 50).encode())[:-30]
    path.write_bytes(content)
    src = tmp_path / "t.de.gz"
    src.write_bytes(path.read_bytes())
    (tmp_path / "t.en").write_text("a\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"train file {path} is not a complete gzip file"):
        ClassificationDataModule(train_file=str(path), min_freq=1, cache=False).raw_splits
    with pytest.raises(ValueError, match=rf"train split source file {src} is not a complete gzip file"):
        TranslationDataModule(train_files=[str(src), str(tmp_path / "t.en")], min_freq=1, cache=False).raw_splits


def test_open_text_names_the_file_for_any_reader(tmp_path):
    from lightning_embinit.text_files import open_text

    path = tmp_path / "x.txt"
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ValueError, match=rf"analogy file {path} is not valid utf-8 text"):
        with open_text(str(path), "analogy") as handle:
            handle.read()


# ---------------------------------------------------------------------------------------------- options
def test_zero_is_a_value_not_unset(tmp_path):
    files = [str(tmp_path / "u.de"), str(tmp_path / "u.en")]
    (tmp_path / "u.de").write_text("ein hund\nein hund\nzwei\n", encoding="utf-8")
    (tmp_path / "u.en").write_text("a dog\na dog\ntwo\n", encoding="utf-8")
    for options, message in [
        ({"min_freq": 0}, r"min_freq must be ≥ 1 or None, got 0"),
        ({"vocab_size": 0}, r"vocab_size must be ≥ 1, got 0"),
        ({"max_size": 0}, r"max_size must be ≥ 1 or None, got 0"),
        ({"eval_batch_size": 0}, r"eval_batch_size must be ≥ 1 or None, got 0"),
        ({"batch_size": 2.5}, r"batch_size must be an integer ≥ 1, got 2.5"),
    ]:
        with pytest.raises(ValueError, match=message):
            TranslationDataModule(train_files=files, cache=False, **options)
    with pytest.raises(ValueError, match=r"min_freq must be ≥ 1 or None, got 0"):
        ClassificationDataModule(train_file=str(tmp_path / "none.tsv"), min_freq=0)


def test_a_wordpiece_size_that_cannot_be_met_is_an_error(tmp_path):
    (tmp_path / "u.de").write_text("ein hund\nein hund\nzwei\n", encoding="utf-8")
    (tmp_path / "u.en").write_text("a dog\na dog\ntwo\n", encoding="utf-8")
    data = TranslationDataModule(
        train_files=[str(tmp_path / "u.de"), str(tmp_path / "u.en")],
        src_tokenizer="wordpiece",
        vocab_size=3,
        cache=False,
    )
    with pytest.raises(ValueError, match=r"vocab_size=3 cannot be met: .* \d+ tokens here; ask for vocab_size ≥ \d+"):
        data.src_tokenizer


def test_the_checks_name_the_argument_the_value_and_the_range():
    from lightning_embinit.checks import check_positive_int, check_probability, check_texts

    with pytest.raises(ValueError, match=r"^dropout must be in \[0, 1\), got 1.0$"):
        check_probability("dropout", 1.0)
    with pytest.raises(ValueError, match=r"^d_model must be ≥ 1, got 0$"):
        check_positive_int("d_model", 0)
    with pytest.raises(ValueError, match=r"^num_heads must be an integer ≥ 1, got True$"):
        check_positive_int("num_heads", True)
    with pytest.raises(TypeError, match=r"texts\[1\] must be a string, got int"):
        check_texts(["a", 5])


# ---------------------------------------------------------------------------------------------- tokenizers
@pytest.fixture(scope="module")
def tokenizers():
    return {
        "word": TextTokenizer.word(SENTENCES, min_freq=1),
        "wordpiece": TextTokenizer.wordpiece(SENTENCES * 5, vocab_size=60),
    }


@pytest.mark.parametrize("kind", ["word", "wordpiece"])
def test_decode_refuses_ids_out_of_range(tokenizers, kind):
    tokenizer = tokenizers[kind]
    dog = tokenizer.encode("dog")
    for bad in (-1, len(tokenizer)):
        with pytest.raises(
            ValueError,
            match=rf"token ids \[{bad}\] are out of range for this {kind} tokenizer's "
            rf"{len(tokenizer)} tokens \(ids 0 … {len(tokenizer) - 1}\)",
        ):
            tokenizer.decode([*dog, bad])
    assert tokenizer.decode(dog) == "dog"


@pytest.mark.parametrize("kind", ["word", "wordpiece"])
def test_a_bare_string_or_a_non_string_is_a_type_error(tokenizers, kind):
    tokenizer = tokenizers[kind]
    with pytest.raises(
        TypeError, match=r"encode_batch\(\) texts must be a list of strings, got a single str .*pass \[text\]"
    ):
        tokenizer.encode_batch("a dog runs")
    for item, type_name in ((None, "NoneType"), (5, "int")):
        with pytest.raises(TypeError, match=rf"encode_batch\(\) texts\[1\] must be a string, got {type_name}"):
            tokenizer.encode_batch(["a dog", item])
    with pytest.raises(TypeError, match=r"encode\(\) takes one string, got NoneType"):
        tokenizer.encode(None)


@pytest.mark.parametrize("kind, key", [("word", "tokens"), ("wordpiece", "tokenizer_json")])
def test_an_incomplete_tokenizer_config_names_the_missing_key_and_the_file(tokenizers, tmp_path, kind, key):
    config = {k: v for k, v in tokenizers[kind].to_config().items() if k != key}
    with pytest.raises(ValueError, match=rf"incomplete {kind} tokenizer config: no \['{key}'\]"):
        TextTokenizer.from_config(config)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(
        ValueError, match=rf"tokenizer config file {path}: incomplete {kind} tokenizer config: no \['{key}'\]"
    ):
        build_tokenizer(str(path))
    with pytest.raises(ValueError, match=rf"src_tokenizer: incomplete {kind} tokenizer config"):
        TranslationDataModule(train_files=["a", "b"], src_tokenizer=config)
