"""EmbeddingVarianceMonitor, LexicalProbe and LearningSpeedMonitor on real fits (single process, CPU)."""

import csv
import warnings

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_embinit import (
    EmbeddingInitCallback,
    EmbeddingVarianceMonitor,
    InitialLossMonitor,
    LearningSpeedMonitor,
    LexicalProbe,
)
from lightning_embinit.callbacks import PublishesSummary
from lightning_embinit.diagnostics import first_crossing, lexical_probe, slot_statistics
from lightning_embinit.models import TiedEmbeddingLM
from lightning_embinit.studies.outcome import is_monitor, number, read_curves, scalars, summaries
from tests.shared_data import require_shared_data

SPECIALS = ["<pad>", "<unk>", "<bos>", "<eos>"]


@pytest.fixture(scope="module")
def glove_path():
    return str(require_shared_data("glove", "glove.6B.50d.multi30k_subset.txt.gz"))


@pytest.fixture(scope="module")
def words(glove_path):
    """The 1,200 most frequent GloVe words (a real word-level vocabulary)."""
    import gzip

    with gzip.open(glove_path, "rt", encoding="utf-8") as handle:
        next(handle)
        return SPECIALS + [next(handle).split(" ", 1)[0] for _ in range(1200)]


@pytest.fixture(scope="module")
def lexical():
    return str(require_shared_data("lexical", "questions-words.txt")), str(
        require_shared_data("lexical", "wordsim353.tsv")
    )


def lm_data(vocab_size, count=48, length=17, seed=0):
    ids = torch.randint(4, vocab_size, (count, length), generator=torch.Generator().manual_seed(seed))
    return DataLoader(TensorDataset(ids[:, :-1], ids[:, 1:]), batch_size=8)


def quiet_trainer(tmp_path, callbacks, **options):
    settings = dict(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        limit_val_batches=0,
        callbacks=callbacks,
    )
    return L.Trainer(**{**settings, **options})


def all_monitors(lexical):
    analogies, wordsim = lexical
    return [
        EmbeddingVarianceMonitor(every_n_steps=1, sample_rows=256),
        LexicalProbe(analogies=analogies, similarity=[wordsim], max_analogies=150, verbose=False),
        LearningSpeedMonitor("train_loss", 0.0, mode="min", check_on="train_step", every_n_steps=1),
    ]


def test_monitors_do_not_change_training(tmp_path, words, lexical):
    """Dropout draws from the global RNG at every step: any draw or write by a monitor would change the weights."""

    def fit(monitors):
        L.seed_everything(0, verbose=False)
        model = TiedEmbeddingLM(
            vocabulary=words,
            architecture={"d_model": 32, "num_heads": 2, "num_layers": 1, "max_len": 16, "dropout": 0.1},
        )
        logger = TensorBoardLogger(tmp_path / f"tb{len(monitors)}", name="")
        init = EmbeddingInitCallback(source="normal:0.2", seed=0, verbose=False)
        quiet_trainer(tmp_path, [init, *monitors], max_steps=5, logger=logger).fit(model, lm_data(len(words)))
        return model.state_dict()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain, monitored = fit([]), fit(all_monitors(lexical))
    assert plain.keys() == monitored.keys()
    assert all(torch.equal(plain[key], monitored[key]) for key in plain)


def recorded_before(trainer, fit_metrics, curves):
    """What a study recorded as ``monitors`` while it named the monitor classes (the reference for the summaries)."""
    values = {name: rows[-1][2] for name, rows in curves.items() if rows and is_monitor(name)}
    values.update({name: value for name, value in fit_metrics.items() if is_monitor(name)})
    for callback in trainer.callbacks:
        if isinstance(callback, InitialLossMonitor) and callback.init_loss is not None:
            attributes = {"init_loss": "init_loss", "ln_vocab": "ln_vocab"}
            attributes |= {"init_loss_predicted": "predicted", "init_loss_predicted_model": "predicted_model"}
            values |= {name: getattr(callback, a) for name, a in attributes.items() if getattr(callback, a) is not None}
            values["init_loss_ratio"] = callback.init_loss / callback.ln_vocab
        elif isinstance(callback, EmbeddingVarianceMonitor) and callback.start:
            for slot, measured in callback.start.items():
                values |= {f"embvar/{slot}/{k}_at_start": v for k, v in measured.items() if number(v) is not None}
        elif isinstance(callback, LexicalProbe):  # the probe at train start: each curve's first logged value
            for name, rows in curves.items():
                if name.startswith(f"{callback.prefix}/") and not name.endswith("no_additive_positional_encoding"):
                    values[f"{name}_at_start"] = rows[0][2]
        elif isinstance(callback, LearningSpeedMonitor):
            base = f"{callback.prefix}/{callback.monitor}"
            values[f"{base}/examples_to_threshold"] = callback.crossed_at_examples
            values[f"{base}/steps_to_threshold"] = callback.crossed_at_step
            values[f"{callback.prefix}/examples_seen"] = callback.examples_seen
    return values


def test_monitor_summaries_give_a_study_the_monitors_it_recorded_by_class(tmp_path, words, lexical):
    monitors = [InitialLossMonitor(track_steps=2, warn=False), *all_monitors(lexical)]
    crossing = LearningSpeedMonitor(
        "train_loss", 100, mode="min", check_on="train_step", every_n_steps=2, prefix="fast"
    )
    init = EmbeddingInitCallback(source="normal:0.2", seed=0, verbose=False)
    logger = CSVLogger(tmp_path, name="csv")
    trainer = quiet_trainer(tmp_path, [init, *monitors, crossing], max_steps=4, logger=logger)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(small_lm(words), lm_data(len(words)))
    assert all(isinstance(monitor, PublishesSummary) for monitor in [*monitors, crossing])
    fit_metrics, curves = scalars(trainer.callback_metrics), read_curves(f"{logger.log_dir}/metrics.csv")
    recorded = summaries(trainer, fit_metrics, {"curves": curves})["monitors"]
    expected = recorded_before(trainer, fit_metrics, curves)
    at_start = [name for name in expected if name.startswith("lexical/") and name.endswith("_at_start")]
    assert at_start and {name: recorded[name] for name in at_start} == {name: expected[name] for name in at_start}
    assert [item for item in recorded.items() if item[0] not in at_start] == [
        item for item in expected.items() if item[0] not in at_start
    ]  # same names, order and numbers
    assert recorded["fast/train_loss/steps_to_threshold"] == 2 and recorded["fast/examples_seen"] == 32
    assert recorded["learning_speed/train_loss/examples_to_threshold"] is None  # the 0.0 threshold: not reached
    assert {"init_loss_ratio", "embvar/tokens/std_at_start", "lexical/tokens/raw/analogy"} <= set(recorded)
    assert set(recorded) == set(expected) and "lexical/tokens/raw+pe/analogy_at_start" in recorded


def read_csv(logger):
    with open(f"{logger.log_dir}/metrics.csv") as handle:
        return list(csv.DictReader(handle))


def test_variance_monitor_logs_the_report_numbers_at_its_steps(tmp_path, words):
    model = TiedEmbeddingLM(
        vocabulary=words, architecture={"d_model": 32, "num_heads": 2, "num_layers": 1, "max_len": 16}
    )
    init = EmbeddingInitCallback(source="normal:0.05", seed=0, verbose=False)
    monitor = EmbeddingVarianceMonitor(every_n_steps=2, sample_rows=128)
    logger = CSVLogger(tmp_path, name="csv")
    quiet_trainer(tmp_path, [init, monitor], max_steps=5, logger=logger).fit(model, lm_data(len(words)))
    start = monitor.start["tokens"]
    for key in ("mean", "std", "min", "max", "scaled_std", "pe_std", "ratio"):
        assert start[key] == pytest.approx(init.reports["tokens"][key], rel=1e-9)  # the init report's numbers
    assert start["pe_range"] == pytest.approx(start["pe_max"] - start["pe_min"])
    assert 0 < start["semantic_retention"] < 1 and 0 < start["positional_retention"] < 1
    rows = [r for r in read_csv(logger) if r.get("embvar/tokens/std")]
    assert sorted({int(r["step"]) for r in rows}) == [0, 2, 4, 5]  # start, every 2 steps, end
    assert float(rows[0]["embvar/tokens/ratio"]) == pytest.approx(start["ratio"])
    assert monitor.latest_step == 5 and monitor.latest["tokens"] == slot_statistics(
        model.embedding_slots()["tokens"]
    ) | {
        key: monitor.latest["tokens"][key]
        for key in ("semantic_retention", "positional_retention", "neighbour_survival")
    }
    state = monitor.state_dict()
    resumed = EmbeddingVarianceMonitor()
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state


def test_variance_monitor_warns_once_when_tokens_drown_positions(tmp_path, words, glove_path):
    def fit(**init_options):
        model = TiedEmbeddingLM(
            vocabulary=words, architecture={"d_model": 50, "num_heads": 2, "num_layers": 1, "max_len": 16}
        )
        init = EmbeddingInitCallback(source=f"file:{glove_path}", seed=0, verbose=False, **init_options)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            quiet_trainer(tmp_path, [init, EmbeddingVarianceMonitor(every_n_steps=1)], max_steps=3).fit(
                model, lm_data(len(words))
            )
        return [str(w.message) for w in caught if "EmbeddingVarianceMonitor" in str(w.message)]

    raw = fit()  # GloVe's std ≈ 0.7 times √50 against sinusoids of std ≈ 0.6
    assert len(raw) == 1 and "drown the position signal" in raw[0]
    assert "standardize='xavier'" in raw[0] and "input scale" in raw[0]
    assert fit(standardize="xavier") == []


def test_figures_and_text_go_to_tensorboard(tmp_path, words, lexical, glove_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model = TiedEmbeddingLM(
        vocabulary=words, architecture={"d_model": 50, "num_heads": 2, "num_layers": 1, "max_len": 16}
    )
    init = EmbeddingInitCallback(source=f"file:{glove_path}", standardize="xavier", seed=0, verbose=False)
    variance, probe, speed = all_monitors(lexical)
    logger = TensorBoardLogger(tmp_path, name="tb")
    quiet_trainer(tmp_path, [init, variance, probe, speed], max_steps=2, logger=logger).fit(model, lm_data(len(words)))
    events = EventAccumulator(logger.log_dir, size_guidance={"images": 0, "tensors": 0, "scalars": 0})
    events.Reload()
    tags = events.Tags()
    assert {
        "embvar/tokens/histogram_start",
        "embvar/tokens/histogram_end",
        "lexical/tokens/pca_start",
        "lexical/tokens/pca_end",
    } <= set(tags["images"])
    assert "lexical/tokens/start/text_summary" in tags["tensors"]
    assert {"embvar/tokens/ratio", "lexical/tokens/raw/analogy", "learning_speed/train_loss_smoothed"} <= set(
        tags["scalars"]
    )


def test_lexical_probe_reports_the_slot_rows(tmp_path, words, lexical, glove_path):
    analogies, wordsim = lexical
    model = TiedEmbeddingLM(
        vocabulary=words, architecture={"d_model": 50, "num_heads": 2, "num_layers": 1, "max_len": 16}
    )
    init = EmbeddingInitCallback(source=f"file:{glove_path}", seed=0, verbose=False)
    probe = LexicalProbe(
        analogies=analogies, similarity=[wordsim], chains=["raw", "raw+pe"], max_analogies=200, verbose=False
    )
    logger = CSVLogger(tmp_path, name="csv")
    quiet_trainer(tmp_path, [init, probe], max_steps=1, logger=logger).fit(model, lm_data(len(words)))
    # the start probe is the function on the initialized table, padding row left out, the slot's own P and scale
    expected = lexical_probe(
        init_table(glove_path, words),
        words[1:],
        analogies=analogies,
        similarity=[wordsim],
        chains=["raw"],
        max_analogies=200,
    )
    assert probe.results["start"]["raw"] == expected["raw"]
    assert probe.results["start"]["raw"]["analogy_count"] > 50 and probe.results["start"]["raw"]["analogy"] > 0.3
    assert set(probe.results) == {"start", "end"}
    logged = [r for r in read_csv(logger) if r.get("lexical/tokens/raw/analogy")]
    assert float(logged[0]["lexical/tokens/raw/analogy"]) == pytest.approx(expected["raw"]["analogy"])
    with pytest.raises(ValueError, match="word-similarity file not found"):
        LexicalProbe(similarity=["/no/such.tsv"])
    with pytest.raises(ValueError, match="unknown lexical chain"):
        LexicalProbe(chains=["cooked"])


def small_lm(words, **optimizer):
    return TiedEmbeddingLM(
        vocabulary=words,
        architecture={"d_model": 32, "num_heads": 2, "num_layers": 1, "max_len": 16},
        optimizer=optimizer,
    )


def start_monitors(wordsim):
    return (
        EmbeddingVarianceMonitor(every_n_steps=None, sample_rows=128, figures=False, warn=False),
        LexicalProbe(similarity=[wordsim], chains=["raw", "raw+pe"], figures=False, verbose=False),
    )


def test_start_monitors_reused_for_a_new_fit_measure_that_fit(tmp_path, words, lexical):
    """A sweep reuses the monitor objects: each fresh fit records its own start."""
    variance, probe = start_monitors(lexical[1])
    for std in (0.05, 0.5):
        expected = small_lm(words)  # the table this fit starts from: the same init on a twin model
        EmbeddingInitCallback(source=f"normal:{std}", seed=0, verbose=False).initialize(expected)
        expected_variance = start_monitors(lexical[1])[0].measure(expected)
        expected_probe = start_monitors(lexical[1])[1].probe(expected)
        init = EmbeddingInitCallback(source=f"normal:{std}", seed=0, verbose=False)
        quiet_trainer(tmp_path, [init, variance, probe], max_steps=1).fit(small_lm(words), lm_data(len(words)))
        assert variance.start == expected_variance and variance.start["tokens"]["std"] == pytest.approx(std, rel=0.05)
        assert probe.results["start"] == expected_probe and set(probe.results) == {"start", "end"}


def test_start_monitors_keep_the_first_start_across_a_resume(tmp_path, words, lexical):
    first = start_monitors(lexical[1])
    init = EmbeddingInitCallback(source="normal:0.05", seed=0, verbose=False)
    trainer = quiet_trainer(tmp_path, [init, *first], max_steps=2)
    trainer.fit(small_lm(words, lr=0.05), lm_data(len(words)))
    path = tmp_path / "step2.ckpt"
    trainer.save_checkpoint(path)
    assert first[0].latest["tokens"]["std"] != pytest.approx(
        first[0].start["tokens"]["std"], rel=1e-3
    )  # training moved the table
    resumed = start_monitors(lexical[1])
    init = EmbeddingInitCallback(source="normal:0.05", seed=0, verbose=False)
    quiet_trainer(tmp_path, [init, *resumed], max_steps=4).fit(
        small_lm(words, lr=0.05), lm_data(len(words)), ckpt_path=path
    )
    assert resumed[0].start == first[0].start and resumed[0].latest_step == 4
    assert (
        resumed[1].results["start"] == first[1].results["start"]
        and resumed[1].results["end"] != first[1].results["end"]
    )


def test_lexical_probe_picks_the_slot_whose_vocabulary_the_test_sets_cover(tmp_path, lexical, monkeypatch):
    """de→en: the English target slot, not the first (German) one; the choice is logged."""
    from lightning_embinit.callbacks import lexical_probe as module
    from lightning_embinit.data import TranslationDataModule
    from lightning_embinit.models import TransformerSeq2Seq

    analogies, wordsim = lexical
    data = TranslationDataModule(data_dir=str(require_shared_data("multi30k")), max_examples=1000, batch_size=16)
    model = TransformerSeq2Seq(
        src_tokenizer=data.src_tokenizer_config,
        tgt_tokenizer=data.tgt_tokenizer_config,
        architecture={"d_model": 16, "num_heads": 2, "num_encoder_layers": 1, "num_decoder_layers": 1, "ffn_dim": 32},
    )
    logged = []
    monkeypatch.setattr(module, "rank_zero_info", logged.append)
    probe = LexicalProbe(
        analogies=analogies, similarity=[wordsim], chains=["raw"], max_analogies=50, figures=False, verbose=False
    )
    quiet_trainer(tmp_path, [probe], max_steps=1).fit(model, data)
    english, german = (set(map(str.upper, data.vocabulary_for(side))) for side in ("tgt", "src"))
    assert probe.probed_slot == "tgt" and list(probe.slot_coverage) == ["src", "tgt"]
    assert probe.slot_coverage == {"src": len(probe.test_words & german), "tgt": len(probe.test_words & english)}
    assert probe.slot_coverage["tgt"] > 3 * probe.slot_coverage["src"]
    assert any("probing slot 'tgt'" in message and "'src'" in message for message in logged)
    start = probe.results["start"]["raw"]
    assert start["similarity_count"]["wordsim353"] >= 10 and start["analogy_count"] == 50
    pinned = LexicalProbe(
        analogies=analogies, similarity=[wordsim], slot="src", chains=["raw"], max_analogies=50, verbose=False
    )
    german_scores = pinned.probe(model, data)["raw"]  # what the first slot gave: German against English test sets
    assert (
        pinned.probed_slot == "src"
        and german_scores["similarity_count"]["wordsim353"] == german_scores["analogy_count"] == 0
    )


def init_table(glove_path, words):
    """The rows EmbeddingInitCallback writes for ``words`` (row 0, the padding row, left out)."""
    model = TiedEmbeddingLM(
        vocabulary=words, architecture={"d_model": 50, "num_heads": 2, "num_layers": 1, "max_len": 16}
    )
    EmbeddingInitCallback(source=f"file:{glove_path}", seed=0, verbose=False).initialize(model)
    return model.model.token_embedding.weight.detach()[1:]


class ScriptedScore(L.LightningModule):
    """Logs ``val_score`` = scores[epoch] at every validation and ``train_score`` = scores[step] at every step."""

    def __init__(self, scores):
        super().__init__()
        self.scores = list(scores)
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        self.log("train_score", float(self.scores[min(self.global_step, len(self.scores) - 1)]))
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch, batch_idx):
        self.log("val_score", float(self.scores[self.current_epoch]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def score_data():
    return DataLoader(TensorDataset(torch.randn(40, 4, generator=torch.Generator().manual_seed(0))), batch_size=8)


SCORES = [0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.95]


def speed_fit(tmp_path, monitor, max_epochs, ckpt_path=None, scores=SCORES, **options):
    trainer = quiet_trainer(
        tmp_path, [monitor], max_epochs=max_epochs, limit_val_batches=1, num_sanity_val_steps=1, **options
    )
    trainer.fit(ScriptedScore(scores), score_data(), score_data(), ckpt_path=ckpt_path)
    return trainer


def test_learning_speed_counts_examples_to_the_smoothed_crossing(tmp_path):
    monitor = LearningSpeedMonitor("val_score", 0.5)
    speed_fit(tmp_path, monitor, max_epochs=6)
    index = first_crossing(SCORES[:6], 0.5)
    assert index == 4  # raw 0.5 at epoch 3, smoothed only at epoch 4
    assert monitor.crossed_at_examples == 40 * (index + 1) and monitor.crossed_at_step == 5 * (index + 1)
    assert monitor.examples_seen == 240 and monitor.tracker.points == 6  # the sanity check is no point

    steps = LearningSpeedMonitor("train_score", 0.5, check_on="train_step", every_n_steps=1)
    speed_fit(tmp_path, steps, max_epochs=1, limit_train_batches=5)  # points after steps 1 … 5 read scores[0 … 4]
    assert (
        steps.crossed_at_step == first_crossing(SCORES[:5], 0.5) + 1
        and steps.crossed_at_examples == 8 * steps.crossed_at_step
    )

    lower = LearningSpeedMonitor("val_score", 0.12, mode="min", debias=False)  # lower is better: 0.1 is already below
    speed_fit(tmp_path, lower, max_epochs=3)
    assert lower.crossed_at_examples == 40 and lower.tracker.last_smoothed == pytest.approx(
        0.6 * (0.6 * 0.1 + 0.4 * 0.2) + 0.4 * 0.3
    )


def test_learning_speed_continues_counting_across_a_resume(tmp_path):
    whole = LearningSpeedMonitor("val_score", 0.5)
    speed_fit(tmp_path, whole, max_epochs=6)
    first = LearningSpeedMonitor("val_score", 0.5)
    trainer = speed_fit(tmp_path, first, max_epochs=3)
    path = tmp_path / "epoch3.ckpt"
    trainer.save_checkpoint(path)
    assert first.examples_seen == 120 and first.crossed_at_examples is None
    resumed = LearningSpeedMonitor("val_score", 0.5)
    speed_fit(tmp_path, resumed, max_epochs=6, ckpt_path=path)
    assert resumed.examples_seen == whole.examples_seen == 240
    assert resumed.crossed_at_examples == whole.crossed_at_examples == 200
    assert resumed.tracker.state_dict() == whole.tracker.state_dict()


def test_learning_speed_monitor_reused_for_a_new_fit_counts_that_fit(tmp_path):
    """A sweep reuses one monitor object: each fresh fit reports its own count and crossing."""
    monitor = LearningSpeedMonitor("val_score", 0.5)
    speed_fit(tmp_path, monitor, max_epochs=6)
    assert (monitor.crossed_at_examples, monitor.examples_seen) == (200, 240)
    faster = [0.1, 0.6, 0.9, 0.95]
    speed_fit(tmp_path, monitor, max_epochs=4, scores=faster)
    index = first_crossing(faster, 0.5)
    assert index == 2 and monitor.crossed_at_examples == 40 * (index + 1) and monitor.crossed_at_step == 5 * (index + 1)
    assert monitor.examples_seen == 160 and monitor.tracker.points == 4


def test_learning_speed_names_a_missing_metric_and_bad_options(tmp_path):
    with pytest.raises(ValueError, match="metric 'val_acc' was not logged by validation \\(logged: .*val_score"):
        speed_fit(tmp_path, LearningSpeedMonitor("val_acc", 0.5), max_epochs=1)
    with pytest.raises(ValueError, match="higher is better"):
        LearningSpeedMonitor("x", 1.0, mode="up")
    with pytest.raises(ValueError, match="check_on"):
        LearningSpeedMonitor("x", 1.0, check_on="epoch")
    with pytest.raises(ValueError, match="every_n_steps"):
        EmbeddingVarianceMonitor(every_n_steps=0)


def test_monitors_configured_from_lightningcli_yaml(tmp_path, glove_path, lexical):
    import yaml

    from lightning_embinit.commands.main import main

    analogies, wordsim = lexical
    multi30k = require_shared_data("multi30k")
    config = {
        "seed_everything": 0,
        "model": {
            "class_path": "lightning_embinit.models.TiedEmbeddingLM",
            "init_args": {"architecture": {"d_model": 50, "num_heads": 2, "num_layers": 1, "max_len": 16}},
        },
        "data": {
            "class_path": "lightning_embinit.data.LanguageModelDataModule",
            "init_args": {
                "train_files": str(multi30k / "val.en.gz"),
                "val_files": str(multi30k / "test_2016_flickr.en.gz"),
                "seq_len": 16,
                "batch_size": 16,
            },
        },
        "trainer": {
            "max_steps": 4,
            "val_check_interval": 2,
            "check_val_every_n_epoch": None,
            "limit_val_batches": 2,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "enable_checkpointing": False,
            "default_root_dir": str(tmp_path),
            "logger": {
                "class_path": "lightning.pytorch.loggers.CSVLogger",
                "init_args": {"save_dir": str(tmp_path), "name": "csv"},
            },
            "callbacks": [
                {
                    "class_path": "lightning_embinit.EmbeddingInitCallback",
                    "init_args": {"source": f"file:{glove_path}", "standardize": "xavier", "seed": 0, "verbose": False},
                },
                {
                    "class_path": "lightning_embinit.EmbeddingVarianceMonitor",
                    "init_args": {"every_n_steps": 2, "sample_rows": 256},
                },
                {
                    "class_path": "lightning_embinit.LexicalProbe",
                    "init_args": {
                        "analogies": analogies,
                        "similarity": [wordsim],
                        "max_analogies": 100,
                        "chains": ["raw", "standardized+pe"],
                        "verbose": False,
                    },
                },
                {
                    "class_path": "lightning_embinit.LearningSpeedMonitor",
                    "init_args": {"monitor": "val_loss", "threshold": 100.0, "mode": "min"},
                },
            ],
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    main(args=["fit", "--config", str(path)])
    with open(tmp_path / "csv" / "version_0" / "metrics.csv") as handle:
        rows = list(csv.DictReader(handle))
    value = lambda key: [(int(r["step"]), float(r[key])) for r in rows if r.get(key)]  # noqa: E731
    assert [step for step, _ in value("embvar/tokens/ratio")] == [0, 2, 4, 4]  # start, steps 2 and 4, end
    assert len(value("lexical/tokens/raw/analogy")) == 2 and len(value("lexical/tokens/standardized+pe/analogy")) == 2
    assert value("learning_speed/examples_seen") == [(2, 32.0), (4, 64.0)]
    assert value("learning_speed/val_loss/examples_to_threshold") == [(2, 32.0)]


class WordsData(L.LightningDataModule):
    """A datamodule that names the rows of a plain model's table (``vocabulary``), as LanguageModelDataModule does."""

    vocabulary = ["<pad>", "cat", "dog", "tiger", "car", "train", "king", "queen", "man", "woman", "sun", "moon"]

    def train_dataloader(self):
        return DataLoader(
            TensorDataset(torch.randint(0, 12, (8, 3), generator=torch.Generator().manual_seed(0))), batch_size=4
        )


def test_lexical_probe_finds_tokens_as_the_init_callback_does(tmp_path):
    from tests.host_models import PlainEmbeddingModel

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("cat\tdog\t7\ncar\ttrain\t6\nking\tqueen\t8\nsun\tmoon\t5\ncat\tcar\t1\n")
    probe = LexicalProbe(similarity=[str(pairs)], chains=["raw"], verbose=False)
    quiet_trainer(tmp_path, [probe], max_steps=1).fit(PlainEmbeddingModel(), datamodule=WordsData())
    assert probe.results["start"]["raw"]["similarity_count"] == {"pairs": 5}  # rows named by the datamodule
    with pytest.raises(ValueError, match="LexicalProbe needs a slot with token strings"):
        quiet_trainer(tmp_path, [LexicalProbe(similarity=[str(pairs)])], max_steps=1).fit(
            PlainEmbeddingModel(), WordsData().train_dataloader()
        )
    default = LexicalProbe()
    assert default.analogies.endswith("questions-words.txt") and default.similarity[0].endswith("wordsim353.tsv")
