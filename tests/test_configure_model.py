"""Issue 19 §1: tables created in ``configure_model`` (or on the meta device), and the strategies refused, in one
process."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.strategies import DeepSpeedStrategy, FSDPStrategy, SingleDeviceStrategy
from torch import nn

from lightning_embinit import (
    EmbeddingInitCallback,
    EmbeddingVarianceMonitor,
    InitialLossMonitor,
    LearningSpeedMonitor,
    LexicalProbe,
)
from lightning_embinit.init import EmbeddingSlot
from lightning_embinit.init.statistics import matrix_statistics
from tests.host_models import make_trainer
from tests.lazy_models import LazyLM, TablesAtTrainStart, lm_loader, reference_tables


def test_tables_made_in_configure_model_are_built_before_training(tmp_path):
    """The issue's example: Trainer(max_steps=2) with source="normal:0.5" on a model that builds in configure_model."""
    callback = EmbeddingInitCallback(source="normal:0.5", seed=3, verbose=False)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    trainer = make_trainer(
        tmp_path, [callback, TablesAtTrainStart(tmp_path), checkpoint], max_steps=2, enable_checkpointing=True
    )
    trainer.fit(LazyLM(), lm_loader())
    start = torch.load(tmp_path / "start-rank0.pt")["embed"]
    expected = reference_tables(source="normal:0.5", seed=3)["embed"]
    assert torch.equal(start, expected)  # the single-process build, bit for bit, before the first step
    assert not callback.resumed and callback.seed_used == 3
    assert callback.reports["embed"]["std"] == pytest.approx(start[1:].double().std(unbiased=False).item(), rel=1e-6)
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert saved["callbacks"][callback.state_key]["reports"]["embed"]["source"] == "normal:0.5"
    assert saved["embinit"]["slots"]["embed"]["parameter"] == "embed.weight"


def test_a_resumed_configure_model_fit_keeps_the_checkpoints_weights_and_report(tmp_path):
    first = make_trainer(tmp_path, [EmbeddingInitCallback(source="normal:0.5", seed=3, verbose=False)], max_steps=2)
    first.fit(LazyLM(), lm_loader())
    path = tmp_path / "run.ckpt"
    first.save_checkpoint(path)
    saved = torch.load(path, weights_only=False)["state_dict"]["embed.weight"]

    callback = EmbeddingInitCallback(source="ones", verbose=False)
    make_trainer(tmp_path, [callback, TablesAtTrainStart(tmp_path)], max_steps=3).fit(
        LazyLM(), lm_loader(), ckpt_path=path
    )
    assert callback.resumed
    assert torch.equal(torch.load(tmp_path / "start-rank0.pt")["embed"], saved)  # never re-initialized
    assert callback.reports["embed"]["source"] == "normal:0.5"


def test_an_embedding_host_may_name_tables_that_configure_model_makes(tmp_path):
    class HostLM(LazyLM):
        def embedding_slots(self):
            return {
                "words": EmbeddingSlot("words", self.words, tokens=self.vocabulary)
            }  # no `words` before configure_model

        def configure_model(self):
            super().configure_model()
            self.words = self.embed

    callback = EmbeddingInitCallback(source="normal:0.5", seed=3, verbose=False)
    make_trainer(tmp_path, [callback, TablesAtTrainStart(tmp_path)]).fit(HostLM(), lm_loader())
    assert torch.equal(
        torch.load(tmp_path / "start-rank0.pt")["embed"], reference_tables(source="normal:0.5", seed=3)["embed"]
    )
    assert (
        list(callback.reports) == ["words"]
        and callback.reports["words"]["tokens_from"] == "the model's embedding_slots()"
    )


def test_monitors_find_tables_made_in_configure_model(tmp_path):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("cat\tdog\t8.0\nsat\tran\t4.0\nmat\tfar\t1.0\nthe\ton\t2.0\n")
    variance = EmbeddingVarianceMonitor(every_n_steps=None, figures=False)
    initial = InitialLossMonitor()
    probe = LexicalProbe(similarity=[str(pairs)], chains=["raw"], figures=False, verbose=False)
    speed = LearningSpeedMonitor("train_loss_for_speed", 100.0, mode="min", check_on="train_step", every_n_steps=1)

    class LoggingLM(LazyLM):
        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.log("train_loss_for_speed", loss)
            return loss

    callbacks = [EmbeddingInitCallback(source="normal:0.5", seed=3, verbose=False), variance, initial, probe, speed]
    make_trainer(tmp_path, callbacks, max_steps=2).fit(LoggingLM(), lm_loader())
    expected = matrix_statistics(reference_tables(source="normal:0.5", seed=3)["embed"][1:])
    assert variance.start["embed"]["std"] == pytest.approx(expected.std, rel=1e-12)
    assert initial.ln_vocab == pytest.approx(math.log(51)) and initial.init_loss is not None
    assert probe.probed_slot == "embed" and probe.results["start"]["raw"]["similarity_count"] == {"pairs": 4}
    assert speed.crossed_at_step == 1


def test_tables_of_an_empty_init_module_are_written(tmp_path):
    """Trainer.init_module(empty_init=True) leaves uninitialized memory on a single device: the callback fills it."""

    class Eager(LazyLM):
        def __init__(self):
            super().__init__()
            self.configure_model()

    trainer = make_trainer(
        tmp_path, [EmbeddingInitCallback(source="normal:0.5", seed=3, verbose=False), TablesAtTrainStart(tmp_path)]
    )
    with trainer.init_module(empty_init=True):
        model = Eager()
    trainer.fit(model, lm_loader())
    assert torch.equal(
        torch.load(tmp_path / "start-rank0.pt")["embed"], reference_tables(source="normal:0.5", seed=3)["embed"]
    )


class NoTables(LightningModule):
    def configure_model(self):
        self.layer = nn.Linear(4, 4)


def fake_trainer(strategy=None):
    return SimpleNamespace(
        strategy=strategy or SingleDeviceStrategy(torch.device("cpu")),
        datamodule=None,
        world_size=1,
        global_rank=0,
        loggers=[],
        optimizers=[],
        ckpt_path=None,
    )


def test_a_model_without_tables_after_configure_model_is_told_why():
    callback = EmbeddingInitCallback(verbose=False)
    model, trainer = NoTables(), fake_trainer()
    callback.setup(trainer, model, "fit")  # no table yet: configure_model may make them
    model.configure_model()
    with pytest.raises(ValueError, match=r"NoTables has no embedding tables.*configure_model\(\) exist only once"):
        callback.on_fit_start(trainer, model)


def test_a_table_that_configure_model_adds_after_a_setup_build_stops_the_fit(tmp_path):
    class Mixed(LazyLM):
        def __init__(self):
            super().__init__(lr=0.0)
            self.early = nn.Embedding(51, 16)

    with pytest.raises(
        ValueError,
        match=r"built early at setup, but configure_model created more embedding tables afterwards \(embed\)",
    ):
        make_trainer(tmp_path, [EmbeddingInitCallback(verbose=False)]).fit(Mixed(), lm_loader())
    chosen = make_trainer(tmp_path, [EmbeddingInitCallback(slots=["early", "embed"], source="ones", verbose=False)])
    model = Mixed()
    chosen.fit(model, lm_loader())  # naming the tables builds both at on_fit_start
    assert torch.all(model.early.weight.detach() == 1) and torch.all(model.embed.weight.detach()[1:] == 1)


def test_meta_tables_wait_for_the_strategy_and_fail_if_none_materializes_them():
    callback = EmbeddingInitCallback(verbose=False)
    with torch.device("meta"):
        model = LazyLM()
        model.configure_model()
    trainer = fake_trainer()
    callback.setup(trainer, model, "fit")
    assert callback.prepared is None and callback._built_at_setup is None  # nothing to write into yet: deferred
    with pytest.raises(
        ValueError, match=r"embed are still on the meta device after SingleDeviceStrategy set the model up"
    ):
        callback.on_fit_start(trainer, model)


def deepspeed(stage: int) -> DeepSpeedStrategy:
    strategy = DeepSpeedStrategy.__new__(DeepSpeedStrategy)  # its __init__ needs the deepspeed package
    strategy.config = {"zero_optimization": {"stage": stage}}
    return strategy


@pytest.mark.parametrize(
    ("strategy", "eager", "message"),
    [
        (FSDPStrategy(), True, r"does not support FSDPStrategy \(FSDP1\).*Use ModelParallelStrategy"),
        (deepspeed(3), True, r"DeepSpeedStrategy here: ZeRO stage 3 partitions every table.*Use ModelParallelStrategy"),
        (deepspeed(2), False, r"DeepSpeedStrategy here: the tables were created in configure_model"),
    ],
    ids=["fsdp1", "deepspeed-stage-3", "deepspeed-stage-2-configure-model"],
)
def test_strategies_that_cannot_take_the_tables_are_refused_before_any_weight_changes(strategy, eager, message):
    model = LazyLM()
    if eager:
        model.configure_model()
    callback, trainer = EmbeddingInitCallback(source="ones", verbose=False), fake_trainer(strategy)
    with pytest.raises(ValueError, match=message):
        callback.setup(trainer, model, "fit")
        model.configure_model()
        callback.on_fit_start(trainer, model)
    assert not torch.all(model.embed.weight.detach() == 1)


def test_deepspeed_stage_2_still_takes_tables_that_exist_at_setup():
    model = LazyLM()
    model.configure_model()
    callback = EmbeddingInitCallback(source="ones", verbose=False)
    callback.setup(fake_trainer(deepspeed(2)), model, "fit")
    assert torch.all(model.embed.weight.detach()[1:] == 1)
