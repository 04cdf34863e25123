"""LanguageModelDataModule and the word vocabulary: text sources, packing, splits and bad input."""

import gzip
import json
import os
import subprocess
import sys

import pytest
import torch

from lightning_embinit.data import LanguageModelDataModule
from lightning_embinit.text import WordTokenizer
from lightning_embinit.vocabulary import SPECIAL_TOKENS, Vocabulary

TEXT = [
    "The cat sat on the mat.",
    "The dog sat on the log, didn't it?",
    "A well-known cat met the U.S. dog at 4:00pm.",
    "The cat and the dog sat on the mat and the log.",
]


def write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_tokenizers():
    regex = WordTokenizer("regex")
    assert regex("A well-known cat didn't meet the U.S. dog at 4:00pm!") == [
        "a",
        "well-known",
        "cat",
        "didn't",
        "meet",
        "the",
        "u.s",
        ".",
        "dog",
        "at",
        "4:00pm",
        "!",
    ]
    assert WordTokenizer("whitespace", lowercase=False)("The cat, sat") == ["The", "cat,", "sat"]
    with pytest.raises(ValueError, match="tokenizer"):
        WordTokenizer("bpe")


def test_vocabulary_build_order_and_limits():
    sentences = [["b", "a", "b", "c"], ["b", "a", "d"]]
    vocab = Vocabulary.build(sentences, min_freq=2)
    assert vocab.tokens == [*SPECIAL_TOKENS.values(), "b", "a"]
    assert vocab.encode(["a", "zzz"]) == [5, vocab.id("unk")] and vocab.decode([4]) == ["b"]
    assert len(Vocabulary.build(sentences, min_freq=1, max_size=6)) == 6
    with pytest.raises(ValueError, match="only the special tokens"):
        Vocabulary.build(sentences, min_freq=4)
    with pytest.raises(ValueError, match="empty corpus"):
        Vocabulary.build([[]])
    with pytest.raises(ValueError, match="max_size"):
        Vocabulary.build(sentences, max_size=4)


def test_default_corpus_is_the_lee_news_text():
    data = LanguageModelDataModule(seq_len=32, batch_size=8)
    vocab = data.vocabulary
    assert vocab[:4] == list(SPECIAL_TOKENS.values()) and vocab[4] == "the" and "bushfire" in vocab
    corpus = data.training_corpus("tokens")
    assert len(corpus) == 300 and corpus[0][:4] == ["hundreds", "of", "people", "have"]
    data.setup("fit")
    assert len(data.train_set) > 1500 and len(data.val_set) > 100
    inputs, targets = next(iter(data.train_dataloader()))
    assert inputs.shape == targets.shape == (8, 32) and inputs.dtype == torch.long
    first_in, first_target = data.train_set[0]
    torch.testing.assert_close(first_in[1:], first_target[:-1])  # targets are the inputs shifted by one


def test_gensims_test_data_is_found_without_importing_gensim():
    """gensim's own ``datapath`` is the reference; in a fresh process, finding the files leaves gensim unimported
    (its import takes seconds of every trial's start)."""
    names = ["lee_background.cor", "lee.cor", "questions-words.txt", "wordsim353.tsv"]
    script = (
        "import json, sys; from lightning_embinit.data.lm import lee_corpus_paths; "
        "from lightning_embinit.text_files import gensim_test_data; "
        f"paths = [gensim_test_data(n) for n in {names!r}]; assert list(lee_corpus_paths()) == paths[:2]; "
        "print(json.dumps([paths, 'gensim' in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    paths, imported = json.loads(done.stdout)
    from gensim.test.utils import datapath

    assert paths == [datapath(name) for name in names] and all(map(os.path.isfile, paths))
    assert imported is False


def test_local_files_packing_and_held_out_split(tmp_path):
    train = write(tmp_path / "train.txt", TEXT * 3)
    data = LanguageModelDataModule(train_files=train, seq_len=5, batch_size=2, min_freq=2, val_fraction=0.25)
    data.setup("fit")
    assert len(data.training_corpus("any")) == 9  # 12 lines, the last quarter held out
    ids = [data.vocab.index[t] if t in data.vocab else data.vocab.id("unk") for t in data.training_corpus("x")[0]]
    first_inputs, first_targets = data.train_set[0]
    assert first_inputs.tolist() == ids[:5] and first_targets.tolist() == ids[1:6]
    eos = data.vocab.id("eos")
    windows = torch.cat([data.train_set[i][0] for i in range(len(data.train_set))])
    assert (windows == eos).sum() >= 3  # every line ends with <eos>
    assert len(data.val_set) >= 1


def test_gzip_validation_file_and_max_size(tmp_path):
    train = write(tmp_path / "train.txt", TEXT * 4)
    val = tmp_path / "val.txt.gz"
    with gzip.open(val, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(TEXT) + "\n")
    data = LanguageModelDataModule(train_files=[train], val_files=str(val), seq_len=4, min_freq=1, max_size=10)
    data.setup("fit")
    assert len(data.vocabulary) == 10 and len(data.training_corpus()) == 16
    assert len(data.val_set) == (sum(len(WordTokenizer()(t)) + 1 for t in TEXT) - 1) // 4


def test_datasets_directory_offline(tmp_path):
    directory = tmp_path / "corpus"
    directory.mkdir()
    write(directory / "train.txt", TEXT * 3)
    write(directory / "validation.txt", TEXT)
    data = LanguageModelDataModule(dataset=str(directory), seq_len=4, min_freq=1)
    data.setup("fit")
    assert len(data.training_corpus()) == 12 and "cat" in data.vocabulary
    with pytest.raises(ValueError, match="column"):
        LanguageModelDataModule(dataset=str(directory), text_column="sentence").vocabulary


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        LanguageModelDataModule(train_files=str(tmp_path / "missing.txt")).vocabulary
    empty = write(tmp_path / "empty.txt", ["", "   "])
    with pytest.raises(ValueError, match="empty"):
        LanguageModelDataModule(train_files=empty).vocabulary
    rare_words = write(tmp_path / "one.txt", ["unique words only here"] * 2)
    with pytest.raises(ValueError, match="only the special tokens"):
        LanguageModelDataModule(train_files=rare_words, min_freq=3).vocabulary
    short = write(tmp_path / "short.txt", TEXT)
    with pytest.raises(ValueError, match="seq_len"):
        LanguageModelDataModule(train_files=short, val_files=short, seq_len=500, min_freq=1).setup("fit")
    with pytest.raises(ValueError, match="val_fraction"):
        LanguageModelDataModule(val_fraction=1.0)
    with pytest.raises(ValueError, match="not both"):
        LanguageModelDataModule(train_files=short, dataset="wikitext")
    with pytest.raises(ValueError, match="tokenizer"):
        LanguageModelDataModule(tokenizer="bpe")


def test_given_vocabulary_is_used_instead_of_one_built_from_the_text(tmp_path):
    """A checkpoint's vocabulary, as a list or a one-token-per-line file, encodes new text unchanged."""
    train = write(tmp_path / "train.txt", TEXT * 3)
    built = LanguageModelDataModule(train_files=train, seq_len=4, min_freq=1).vocabulary
    given = [*SPECIAL_TOKENS.values(), "zebra", "the", "cat"]  # ids unlike the text's own
    data = LanguageModelDataModule(train_files=train, seq_len=4, min_freq=1, vocabulary=given)
    assert data.vocabulary == given != built
    data.setup("fit")
    unk, the, cat = data.vocab.id("unk"), given.index("the"), given.index("cat")
    assert set(data.train_set.tensors[0].unique().tolist()) <= {unk, data.vocab.id("eos"), the, cat}
    assert data.train_set.tensors[0][0, :3].tolist() == [the, cat, unk]  # "the cat sat"
    path = tmp_path / "vocab.txt"
    Vocabulary(given).write(path)
    assert path.read_text().splitlines() == given
    from_file = LanguageModelDataModule(train_files=train, seq_len=4, vocabulary=str(path))
    assert from_file.vocabulary == given and from_file.hparams.vocabulary == str(path)


def test_given_vocabulary_is_validated(tmp_path):
    with pytest.raises(ValueError, match=r"vocabulary=: special tokens \['<bos>'\] are not in the vocabulary"):
        LanguageModelDataModule(vocabulary=["<pad>", "<unk>", "<eos>", "a"])
    with pytest.raises(ValueError, match=r"same token twice; repeated: \['a'\]"):
        LanguageModelDataModule(vocabulary=[*SPECIAL_TOKENS.values(), "a", "b", "a"])
    with pytest.raises(ValueError, match="non-empty strings"):
        LanguageModelDataModule(vocabulary=[*SPECIAL_TOKENS.values(), ""])
    with pytest.raises(ValueError, match="vocabulary file not found"):
        LanguageModelDataModule(vocabulary=str(tmp_path / "missing.txt"))
    blank = write(tmp_path / "blank.txt", [*SPECIAL_TOKENS.values(), "", "a"])
    with pytest.raises(ValueError, match=r"blank.txt: empty line\(s\) \[5\]"):
        LanguageModelDataModule(vocabulary=blank)
    twice = write(tmp_path / "twice.txt", [*SPECIAL_TOKENS.values(), "a", "a"])
    with pytest.raises(ValueError, match="twice.txt: a vocabulary cannot list the same token twice"):
        LanguageModelDataModule(vocabulary=twice)
    crlf = tmp_path / "crlf.txt"
    crlf.write_bytes("\r\n".join([*SPECIAL_TOKENS.values(), "a"]).encode() + b"\r\n")
    assert LanguageModelDataModule(vocabulary=str(crlf)).vocabulary == [*SPECIAL_TOKENS.values(), "a"]


def test_validation_only_text_with_a_given_vocabulary(tmp_path):
    val = write(tmp_path / "new.txt", TEXT * 2)
    vocabulary = [*SPECIAL_TOKENS.values(), "the", "cat", "dog"]
    with pytest.raises(ValueError, match="val_files needs train_files"):
        LanguageModelDataModule(val_files=val)
    data = LanguageModelDataModule(val_files=val, vocabulary=vocabulary, seq_len=4, batch_size=2)
    data.setup("validate")
    assert data.train_set is None and len(data.val_set) > 0
    inputs, targets = next(iter(data.val_dataloader()))
    assert inputs.shape == (2, 4) and int(inputs.max()) < len(vocabulary)
    with pytest.raises(ValueError, match="validation text only"):
        data.training_corpus()
    with pytest.raises(ValueError, match="validation text only"):
        data.setup("fit")


def test_dataset_is_downloaded_in_prepare_data_and_read_in_setup(tmp_path, monkeypatch):
    import datasets

    directory = tmp_path / "corpus"
    directory.mkdir()
    write(directory / "train.txt", TEXT * 3)
    write(directory / "validation.txt", TEXT)
    calls = []
    real = datasets.load_dataset

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", counting)
    vocabulary = [*SPECIAL_TOKENS.values(), "the", "cat"]
    data = LanguageModelDataModule(dataset=str(directory), seq_len=4, vocabulary=vocabulary)
    assert data.vocabulary == vocabulary and calls == []  # construction and the CLI link read nothing
    data.prepare_data()
    assert calls == [(str(directory), None)]
    data.setup("fit")  # reads from the datasets cache
    assert len(calls) == 2 and len(data.training_corpus()) == 12 and len(data.val_set) > 0
    LanguageModelDataModule(train_files=write(tmp_path / "t.txt", TEXT)).prepare_data()  # local files: nothing
    assert len(calls) == 2
    built = LanguageModelDataModule(dataset=str(directory), seq_len=4, min_freq=1)
    assert "cat" in built.vocabulary and len(calls) == 3  # a vocabulary built from the text reads it at once
    with pytest.raises(ValueError, match="not both"):
        LanguageModelDataModule(
            dataset=str(directory), val_files=str(directory / "validation.txt"), vocabulary=vocabulary
        )
