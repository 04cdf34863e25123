"""The one vocabulary type: its constructors, and its round trip through a dict, a tokenizer config and a checkpoint."""

import json

import lightning as L
import pytest

from lightning_embinit.models import TiedEmbeddingLM, TransformerClassifier, TransformerSeq2Seq
from lightning_embinit.text import TextTokenizer
from lightning_embinit.vocabulary import SPECIAL_TOKENS, Vocabulary

TEXTS = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"] * 3
SIZES = {"d_model": 16, "num_heads": 2, "ffn_dim": 32, "max_len": 16}


def test_the_constructors_agree_on_ids_and_special_tokens():
    words = Vocabulary.build([text.split() for text in TEXTS], min_freq=2)
    assert words.tokens[:4] == list(SPECIAL_TOKENS.values()) and len(words) == words.size
    assert [words.id(role) for role in SPECIAL_TOKENS] == [0, 1, 2, 3] and words.pad_id == 0
    assert Vocabulary.from_tokens(words.tokens) == words  # the package's special tokens found by name
    assert words.encode(["cat", "zebra"]) == [words.index["cat"], 1] and words.decode([4]) == [words.tokens[4]]
    numbered = Vocabulary.numbered(8)
    assert numbered.tokens is None and numbered.special_ids == {"pad": 0, "unk": 1, "bos": 2, "eos": 3}
    assert Vocabulary.of(8, numbered=True) == numbered and Vocabulary.of(8) == Vocabulary.sized(8)
    with pytest.raises(ValueError, match=r"special-token ids \{'pad': 9\} are outside the vocabulary's 8 ids"):
        Vocabulary.sized(8, special_ids={"pad": 9})
    with pytest.raises(ValueError, match=r"special tokens \['<eos>'\] are not in the vocabulary"):
        Vocabulary.from_tokens(["<pad>", "a"], {"pad": "<pad>", "eos": "<eos>"})


@pytest.mark.parametrize(
    "vocabulary",
    [
        Vocabulary.build([text.split() for text in TEXTS], min_freq=1),
        Vocabulary.from_tokens(["[PAD]", "a", "a", "b"], {"pad": "[PAD]"}, origin="a token list"),
        Vocabulary.numbered(12),
        Vocabulary.sized(5, special_ids={"pad": 0}, special_tokens={"pad": "<pad>"}),
    ],
    ids=["built", "any list", "numbered", "sized"],
)
def test_a_vocabulary_round_trips_through_its_json_dict(vocabulary):
    again = Vocabulary.from_dict(json.loads(json.dumps(vocabulary.to_dict())))
    assert again == vocabulary and again.origin == vocabulary.origin and again.index == vocabulary.index
    assert again.slot_arguments() == vocabulary.slot_arguments()


@pytest.mark.parametrize("kind", ["word", "wordpiece"])
def test_a_tokenizer_config_gives_back_the_same_vocabulary(kind):
    tokenizer = (
        TextTokenizer.word(TEXTS, min_freq=1, roles=("cls", "sep"))
        if kind == "word"
        else TextTokenizer.wordpiece(TEXTS, vocab_size=60, min_frequency=1)
    )
    again = TextTokenizer.from_config(json.loads(json.dumps(tokenizer.to_config())))
    assert again.vocabulary == tokenizer.vocabulary and again.vocabulary.special_ids == tokenizer.role_ids


def save_and_load(model: L.LightningModule, path) -> L.LightningModule:
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.strategy.connect(model)
    trainer.save_checkpoint(path)
    return type(model).load_from_checkpoint(path)


def test_each_system_gets_its_vocabulary_back_from_a_checkpoint(tmp_path):
    tokenizer = TextTokenizer.word(TEXTS, min_freq=1)
    systems = {
        "lm": TiedEmbeddingLM(vocabulary=list(tokenizer.tokens), architecture={**SIZES, "num_layers": 1}),
        "sized lm": TiedEmbeddingLM(
            vocab_size=40, special_tokens={"pad": "<pad>"}, architecture={**SIZES, "num_layers": 1}
        ),
        "classifier": TransformerClassifier(
            tokenizer=tokenizer.to_config(), num_classes=2, architecture={**SIZES, "num_layers": 1}
        ),
        "translation": TransformerSeq2Seq(
            src_tokenizer=tokenizer.to_config(),
            tgt_vocab_size=30,
            architecture={**SIZES, "num_encoder_layers": 1, "num_decoder_layers": 1},
        ),
    }
    for name, model in systems.items():
        loaded = save_and_load(model, tmp_path / f"{name}.ckpt")
        for side in ("vocab", "src_vocab", "tgt_vocab"):
            if hasattr(model.model, side):
                assert getattr(loaded.model, side) == getattr(model.model, side), (name, side)
    assert systems["classifier"].model.vocab == tokenizer.vocabulary
