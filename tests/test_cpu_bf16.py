"""bf16 on CPUs: ``precision="bf16-mixed"`` fits of every system with the callbacks (finite, the init report of a
float32 run, monitors computed in float32), ``bf16-true`` tables rounded stochastically and reported as they train,
and the study protocol's ``precision``."""

from __future__ import annotations

import copy
import math
import warnings
from types import SimpleNamespace
from typing import Any

import lightning as L
import numpy as np
import pytest
import torch
import yaml
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.precision import MixedPrecision
from torch.utils.data import DataLoader, TensorDataset

from lightning_embinit import EmbeddingInitCallback, EmbeddingVarianceMonitor, InitialLossMonitor, LearningSpeedMonitor
from lightning_embinit.init.host import discover_slots
from lightning_embinit.models import (
    HuggingFaceLM,
    ReinforcedTransformerSeq2Seq,
    TiedEmbeddingLM,
    TransformerClassifier,
    TransformerSeq2Seq,
)
from lightning_embinit.studies.keys import StudyError, digest
from lightning_embinit.studies.spec import Study, package_version
from lightning_embinit.studies.trial import TrialLaunch, build_cli, run_trial, write_config
from lightning_embinit.text import TextTokenizer
from tests.study_helpers import tiny_study

VOCAB, LENGTH, BATCH = 64, 8, 8
TINY = {"d_model": 16, "num_heads": 2, "ffn_dim": 32, "max_len": 16, "dropout": 0.1}


def _ids(generator: torch.Generator, count: int = 2 * BATCH, low: int = 4, high: int = VOCAB) -> torch.Tensor:
    return torch.randint(low, high, (count, LENGTH + 1), generator=generator)


def build(family: str) -> tuple[L.LightningModule, TensorDataset]:
    """A tiny model of ``family`` (seeded: the same weights every call) and random data for it."""
    generator = torch.Generator().manual_seed(1)
    torch.manual_seed(0)
    if family == "TiedEmbeddingLM":
        ids = _ids(generator)
        return TiedEmbeddingLM(vocab_size=VOCAB, architecture={**TINY, "num_layers": 1}), TensorDataset(
            ids[:, :-1], ids[:, 1:]
        )
    if family in ("TransformerSeq2Seq", "ReinforcedTransformerSeq2Seq"):
        cls = TransformerSeq2Seq if family == "TransformerSeq2Seq" else ReinforcedTransformerSeq2Seq
        layers = {"num_encoder_layers": 1, "num_decoder_layers": 1}
        model = cls(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, architecture={**TINY, **layers})
        src = _ids(generator)[:, :LENGTH]
        bos, eos = (torch.full((src.shape[0], 1), token) for token in (model.model.bos_id, model.model.eos_id))
        return model, TensorDataset(src, torch.cat([bos, src, eos], dim=1))
    if family == "TransformerClassifier":
        ids = _ids(generator)
        model = TransformerClassifier(vocab_size=VOCAB, num_classes=2, architecture={**TINY, "num_layers": 1})
        return model, TensorDataset(ids, (ids[:, 1] < VOCAB // 2).long())
    tokenizer = TextTokenizer.word([" ".join(f"w{i}" for i in range(VOCAB))], min_freq=1)
    config = {"n_embd": 16, "n_layer": 1, "n_head": 2, "n_positions": 16}
    model = HuggingFaceLM("gpt2", config=config, tokenizer=tokenizer.to_config())
    ids = _ids(generator, low=len(tokenizer) - VOCAB, high=len(tokenizer))
    return model, TensorDataset(ids[:, :-1], ids[:, 1:])


FAMILIES = ("TiedEmbeddingLM", "TransformerSeq2Seq", "ReinforcedTransformerSeq2Seq", "TransformerClassifier")
HF = "HuggingFaceLM"


class Recorder(Callback):
    """Every training loss, the module's state and the batch before the first step, and the dtypes the module's
    linear layers return under autocast (the training steps; a monitor's own forward passes run in float32)."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.start_state: dict[str, torch.Tensor] | None = None
        self.first_batch: Any = None
        self.linear_dtypes: set[torch.dtype] = set()

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        for layer in pl_module.modules():
            if isinstance(layer, torch.nn.Linear):
                layer.register_forward_hook(self._seen)

    def _seen(self, module: Any, args: Any, out: torch.Tensor) -> None:
        if torch.is_autocast_enabled("cpu"):
            self.linear_dtypes.add(out.dtype)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.start_state is None:
            self.start_state = copy.deepcopy(pl_module.state_dict())
            self.first_batch = batch

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        assert loss.dtype == torch.float32
        self.losses.append(float(loss))


def callbacks() -> dict[str, Callback]:
    return {
        "init": EmbeddingInitCallback(source="normal:0.05", seed=0, verbose=False),
        "initial_loss": InitialLossMonitor(track_steps=2),
        "variance": EmbeddingVarianceMonitor(every_n_steps=1, figures=False, sample_rows=16),
        "speed": LearningSpeedMonitor("train_loss", threshold=0.1, mode="min", check_on="train_step", every_n_steps=1),
    }


def fit(
    module: L.LightningModule, data: TensorDataset, precision: str, extra: list[Callback], **trainer_options: Any
) -> L.Trainer:
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        precision=precision,
        max_steps=3,
        callbacks=extra,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        **trainer_options,
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(does not have many workers|val_dataloader).*")
        trainer.fit(module, DataLoader(data, batch_size=BATCH))
    return trainer


def numbers(value: Any) -> list[float]:
    """Every number of a nested report (booleans and None left out); anything else numeric (a tensor) fails."""
    if isinstance(value, dict):
        return [number for item in value.values() for number in numbers(item)]
    if isinstance(value, (list, tuple)):
        return [number for item in value for number in numbers(item)]
    assert not isinstance(value, (torch.Tensor, np.ndarray)), f"a tensor in a report: {value!r}"
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def close_reports(got: Any, expected: Any, rel: float) -> None:
    if isinstance(expected, dict):
        assert set(got) == set(expected)
        for key in expected:
            close_reports(got[key], expected[key], rel)
    elif isinstance(expected, float):
        assert got == pytest.approx(expected, rel=rel, abs=1e-12)
    elif not isinstance(expected, (list, tuple)):
        assert got == expected


@pytest.mark.parametrize("family", [*FAMILIES, HF])
def test_a_bf16_mixed_fit_on_cpu_is_finite_with_float32_reports_and_monitors(family):
    module, data = build(family)
    found, recorder = callbacks(), Recorder()
    fit(module, data, "bf16-mixed", [recorder, *found.values()])
    assert len(recorder.losses) == 3 and all(math.isfinite(loss) for loss in recorder.losses)
    assert {parameter.dtype for parameter in module.parameters()} == {torch.float32}  # fp32 master weights
    summaries = {name: callback.summary() for name, callback in found.items() if name != "init"}
    values = numbers({"report": found["init"].reports, **summaries})
    assert values and all(math.isfinite(value) for value in values)
    # the init report of a float32 model built alike: the tables are written before autocast plays any part
    reference, _ = build(family)
    expected = EmbeddingInitCallback(source="normal:0.05", seed=0, verbose=False).initialize(reference)
    close_reports(found["init"].reports, expected, rel=1e-6)
    # the steps ran their products in bf16; a bf16 loss of the start weights is near the float32 one, not equal
    assert recorder.linear_dtypes == {torch.bfloat16}
    reference.load_state_dict(recorder.start_state)
    reference.train(False)  # no dropout: the same function in both precisions
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*self.log.*")
        exact = float(reference.training_step(recorder.first_batch, 0))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            rounded = float(reference.training_step(recorder.first_batch, 0))
    assert rounded == pytest.approx(exact, rel=3e-2) and rounded != exact
    # the variance monitor's numbers are float32 statistics of the trained table, not bf16 ones
    slot_name, slot = next(iter(discover_slots(module).items()))
    table = slot.weight.detach().double().numpy()
    rows = np.delete(table, slot.padding_idx, axis=0) if slot.padding_idx is not None else table
    measured = summaries["variance"][f"embvar/{slot_name}/std"]
    assert measured == pytest.approx(float(rows.std()), rel=1e-5)


def bf16_neighbours(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The bf16 numbers just below and just above each float32 value (equal where it is one)."""
    bits = values.view(torch.int32)
    down = (bits & ~0xFFFF).view(torch.float32)  # truncation: toward zero
    up = ((bits & ~0xFFFF) + 0x10000).view(torch.float32)  # one bf16 step away from zero
    exact = (bits & 0xFFFF) == 0
    low = torch.where(values >= 0, down, up)
    high = torch.where(values >= 0, up, down)
    return torch.where(exact, values, low), torch.where(exact, values, high)


class TableAtStart(Callback):
    def __init__(self) -> None:
        self.table: torch.Tensor | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.table = next(iter(discover_slots(pl_module).values())).weight.detach().clone()


@pytest.mark.parametrize("family", ["TiedEmbeddingLM", HF])
def test_bf16_true_tables_are_rounded_stochastically_and_the_report_describes_them(family):
    module, data = build(family)
    found, table = callbacks(), TableAtStart()
    fit(module, data, "bf16-true", [table, found["init"]])
    assert table.table.dtype == torch.bfloat16 and all(p.dtype == torch.bfloat16 for p in module.parameters())
    reference, _ = build(family)
    EmbeddingInitCallback(source="normal:0.05", seed=0, verbose=False).initialize(reference)
    slot = next(iter(discover_slots(reference).values()))
    exact, written = slot.weight.detach(), table.table.float()
    keep = torch.ones(exact.shape[0], dtype=torch.bool)
    if slot.padding_idx is not None:
        keep[slot.padding_idx] = False
    exact, written = exact[keep], written[keep]
    low, high = bf16_neighbours(exact)
    assert torch.all((written == low) | (written == high))  # one of the two neighbours each time
    nearest = exact.to(torch.bfloat16).float()
    assert (written != nearest).float().mean() > 0.15  # not round-to-nearest (Lightning's conversion)
    step = (high - low).clamp_min(1e-30)
    ulps = ((written - exact) / step)[high != low]
    assert abs(float(ulps.mean())) < 0.05  # unbiased: E[rounded] = the float32 value
    report = next(iter(found["init"].reports.values()))
    assert report["min"] == float(written.min()) and report["max"] == float(written.max())
    assert report["std"] == pytest.approx(float(written.double().std(unbiased=False)), rel=1e-6)


def test_the_protocol_precision_keeps_old_hashes_enters_the_hash_and_reaches_the_trainer(tmp_path):
    [plain] = Study.from_dict(tiny_study(settings={"normal": {}}, seeds=[0])).trials()
    protocol = {"monitor": "val_loss", "mode": "min", "test": "auto", "checkpoints": "none"}
    hashed = {"config": plain.config, "seed": 0, "protocol": protocol, "version": package_version()}
    assert plain.config_hash == digest(hashed)  # a study without the option hashes as before it existed
    study = Study.from_dict(tiny_study(settings={"normal": {}}, seeds=[0], protocol={"precision": "bf16-mixed"}))
    [trial] = study.trials()
    assert trial.config == plain.config and trial.config_hash != plain.config_hash
    assert trial.config_hash == digest({**hashed, "protocol": {**protocol, "precision": "bf16-mixed"}})
    assert Study.from_dict(study.to_dict()).trials()[0].config_hash == trial.config_hash
    write_config(trial, tmp_path, TrialLaunch())
    assert build_cli(trial, tmp_path, TrialLaunch()).trainer.precision == "bf16-mixed"


def test_a_trial_trains_in_the_protocols_precision(tmp_path):
    study = tiny_study(settings={"normal": {}}, seeds=[0], protocol={"precision": "bf16-mixed"})
    [trial] = Study.from_dict(study).trials()
    record = run_trial(trial, tmp_path)
    assert record["status"] == "done", record["error"]
    assert math.isfinite(record["metrics"]["best_val_loss"])
    assert record["protocol"]["precision"] == "bf16-mixed"
    saved = yaml.safe_load((tmp_path / "runs" / trial.trial_id / "csv" / "config.yaml").read_text())
    assert saved["trainer"]["precision"] == "bf16-mixed"  # what LightningCLI built the trainer from


@pytest.mark.parametrize(
    ("protocol", "overrides", "message"),
    [
        ({"precision": "bf16"}, {}, r"unknown protocol precision 'bf16'; choose one of: .*bf16-mixed"),
        ({"precision": "bf16-mixed"}, {"trainer.precision": "32-true"}, r"trainer.precision '32-true' disagrees"),
    ],
)
def test_a_bad_or_contradicted_protocol_precision_is_refused(protocol, overrides, message):
    study = tiny_study(settings={"normal": overrides}, seeds=[0], protocol=protocol)
    with pytest.raises(StudyError, match=message):
        Study.from_dict(study).trials()


class ClipWitness(Callback):
    """Every step's gradients as the backward left them and as the optimizer used them (they stay in ``.grad``
    after the step: Lightning zeroes them at the next step's start)."""

    def __init__(self) -> None:
        self.before: list[torch.Tensor] = []
        self.after: list[torch.Tensor] = []

    @staticmethod
    def gradients(module: L.LightningModule) -> torch.Tensor:
        return torch.cat([p.grad.detach().flatten().clone() for p in module.parameters() if p.grad is not None])

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self.before.append(self.gradients(pl_module))

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.after.append(self.gradients(pl_module))


@pytest.mark.parametrize(("algorithm", "clip"), [("norm", 1e-3), ("value", 1e-4)])
def test_gradients_are_clipped_under_bf16_mixed_with_the_fused_adam(algorithm, clip):
    """Lightning refuses to clip for a fused optimizer under any mixed precision; under bf16-mixed (no loss scale)
    the systems keep fused Adam and clip themselves. Against the clipping formulas."""
    module, data = build("TransformerSeq2Seq")
    witness = ClipWitness()
    trainer = fit(module, data, "bf16-mixed", [witness], gradient_clip_val=clip, gradient_clip_algorithm=algorithm)
    assert trainer.optimizers[0].defaults["fused"]
    assert len(witness.before) == len(witness.after) == 3
    for before, after in zip(witness.before, witness.after, strict=True):
        if algorithm == "norm":
            assert before.norm() > clip
            expected = before * min(1.0, clip / (float(before.norm()) + 1e-6))  # torch.nn.utils.clip_grad_norm_
        else:
            assert before.abs().max() > clip
            expected = before.clamp(-clip, clip)
        torch.testing.assert_close(after, expected, rtol=1e-4, atol=1e-9)


@pytest.mark.parametrize(
    ("precision", "clip", "fused"),
    [("16-mixed", 1.0, False), ("16-mixed", None, True), ("16-mixed", 0.0, True), ("bf16-mixed", 1.0, True)],
)
def test_adam_is_unfused_only_where_clipping_meets_a_loss_scale(monkeypatch, precision, clip, fused):
    """16-mixed (GPUs only: Lightning runs bf16 on a CPU) clips gradients after unscaling them, which a fused step
    would do itself too late: such a fit gets the unfused Adam; every other keeps the fused kernel."""
    module, _ = build("TiedEmbeddingLM")
    assert module.configure_optimizers().defaults["fused"]  # no Trainer attached
    attached = SimpleNamespace(precision_plugin=MixedPrecision(precision, "cpu"), gradient_clip_val=clip)
    monkeypatch.setattr(type(module), "trainer", property(lambda self: attached))
    assert bool(module.configure_optimizers().defaults["fused"]) is fused


def test_other_precision_plugins_clip_as_lightning_does():
    """bf16-true's plugin clips fused optimizers itself: the systems leave it to Lightning (the norm bound holds)."""
    module, data = build("TransformerSeq2Seq")
    witness = ClipWitness()
    trainer = fit(module, data, "bf16-true", [witness], gradient_clip_val=1e-3)
    assert trainer.optimizers[0].defaults["fused"]
    assert all(before.float().norm() > 1e-3 for before in witness.before)
    assert all(after.float().norm() <= 1e-3 * 1.02 for after in witness.after)
