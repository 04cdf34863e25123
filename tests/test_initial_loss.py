"""InitialLossMonitor on TiedEmbeddingLM and on generic LightningModules (single process)."""

import csv
import math
import re
import warnings

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_embinit.callbacks.initial_loss import InitialLossMonitor, sequence_length
from lightning_embinit.diagnostics.initial_loss import token_std
from lightning_embinit.models import TiedEmbeddingLM, tied_initial_loss


def windows(n_vocab, count=16, length=17, seed=0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, n_vocab, (count, length), generator=generator)
    return TensorDataset(ids[:, :-1], ids[:, 1:])


def trainer(tmp_path, monitor, **options):
    options = {
        "max_steps": 3,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "limit_val_batches": 0,
        "default_root_dir": tmp_path,
        **options,
    }
    return L.Trainer(callbacks=[monitor], **options)


class Classifier(L.LightningModule):
    """A plain module: no embedding, no EmbeddingHost; training_step returns a dict."""

    def __init__(self, classes=7):
        super().__init__()
        self.body = nn.Linear(5, 16)
        self.out = nn.Linear(16, classes)

    def forward(self, x):
        return self.out(torch.relu(self.body(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return {"loss": F.cross_entropy(self(x), y), "extra": 1}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


class TiedBigram(L.LightningModule):
    """Not a host: an nn.Embedding whose weight an nn.Linear shares (found by identity)."""

    def __init__(self, n=2000, d=256, sigma=1 / 16):
        super().__init__()
        self.embed = nn.Embedding(n, d)
        nn.init.normal_(self.embed.weight, std=sigma)
        self.norm = nn.LayerNorm(d)
        self.decoder = nn.Linear(d, n, bias=False)
        self.decoder.weight = self.embed.weight

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.decoder(self.norm(self.embed(x)))
        return F.cross_entropy(logits.flatten(0, 1), y.flatten())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def test_generic_module_vocab_from_output_layer(tmp_path):
    torch.manual_seed(0)
    x, y = torch.randn(32, 5), torch.randint(0, 7, (32,))
    model = Classifier()
    with torch.no_grad():
        expected = F.cross_entropy(model(x[:8]), y[:8]).item()
    monitor = InitialLossMonitor(track_steps=2)
    run = trainer(tmp_path, monitor)
    run.fit(model, DataLoader(TensorDataset(x, y), batch_size=8))
    assert monitor.ln_vocab == pytest.approx(math.log(7))
    assert monitor.init_loss == pytest.approx(expected, rel=1e-6)
    assert monitor.predicted is None and monitor.predicted_model is None
    assert len(monitor.step_losses) == 2 and monitor.step_losses[0] == monitor.init_loss
    assert float(run.callback_metrics["init_loss"]) == pytest.approx(expected, rel=1e-6)
    assert float(run.callback_metrics["init_loss_ratio"]) == pytest.approx(expected / math.log(7), rel=1e-6)
    assert InitialLossMonitor(vocab_size=11)._resolve(model) is None
    with pytest.raises(ValueError, match="vocab_size"):
        InitialLossMonitor()._resolve(nn.Sequential(nn.ReLU()))


def test_tied_non_host_module_gets_spec_prediction_and_warning(tmp_path):
    torch.manual_seed(0)
    model = TiedBigram()
    sigma = model.embed.weight.std(unbiased=False).item()
    monitor = InitialLossMonitor()
    with pytest.warns(UserWarning, match="log_n_over_d") as caught:
        trainer(tmp_path, monitor, max_steps=1).fit(model, DataLoader(windows(2000), batch_size=4))
    assert monitor.predicted == pytest.approx(tied_initial_loss(2000, 256, sigma))
    assert abs(monitor.init_loss - monitor.predicted) / monitor.predicted < 0.03
    message = str([w for w in caught if "log_n_over_d" in str(w.message)][0].message)
    assert "tied" in message and "tied_half_swap" in message and "untie" in message
    assert float(re.search(r"dσ = (\d+\.\d+)", message).group(1)) == pytest.approx(256 * sigma, abs=0.01)


def test_spec_formula_and_model_estimate_are_logged_apart(tmp_path):
    """init_loss_predicted is [S]'s ln(e^{dσ} + n − 1) from the table's σ (padding row left out);
    init_loss_predicted_model is the model's own estimate for the first batch's length, not max_len."""
    torch.manual_seed(0)
    vocabulary = ["<pad>", "<unk>", "<bos>", "<eos>", *(f"w{i}" for i in range(296))]
    model = TiedEmbeddingLM(
        vocabulary=vocabulary,
        architecture={"d_model": 64, "num_layers": 1, "max_len": 512, "embedding_init": "normal:0.125"},
    )
    sigma = token_std(model.model.token_embedding.weight, padding_idx=0)
    assert sigma != pytest.approx(token_std(model.model.token_embedding.weight), rel=1e-4)  # the zero row matters
    spec = tied_initial_loss(300, 64, sigma)
    at_16, at_max_len = model.initial_loss_prediction(length=16), model.initial_loss_prediction()
    monitor = InitialLossMonitor(warn=False)
    run = trainer(tmp_path, monitor, max_steps=1)
    run.fit(model, DataLoader(windows(300, count=64), batch_size=64))  # windows of 16 tokens
    assert monitor.predicted == pytest.approx(spec, rel=1e-9)
    assert float(run.callback_metrics["init_loss_predicted"]) == pytest.approx(spec, rel=1e-6)
    assert monitor.predicted_model == pytest.approx(at_16, rel=1e-9) and abs(at_16 - at_max_len) > 0.1
    assert float(run.callback_metrics["init_loss_predicted_model"]) == pytest.approx(at_16, rel=1e-6)
    assert abs(monitor.init_loss - at_16) < abs(monitor.init_loss - at_max_len)  # positions 0–15 are what it saw
    assert monitor.state_dict()["predicted_model"] == monitor.predicted_model


@pytest.mark.parametrize("embedding_init", ["normal:0.125", "xavier"])
def test_the_random_token_loss_is_the_models_own_probe_at_the_first_batchs_length(tmp_path, embedding_init):
    """init_loss_random_tokens is the model's forward on random tokens before the first update (its probe, at the
    first batch's length), for i.i.d. rows near the model's [S] estimate; a module without a probe logs none."""
    torch.manual_seed(0)
    vocabulary = ["<pad>", "<unk>", "<bos>", "<eos>", *(f"w{i}" for i in range(296))]
    model = TiedEmbeddingLM(
        vocabulary=vocabulary,
        architecture={"d_model": 64, "num_layers": 1, "max_len": 64, "embedding_init": embedding_init},
    )
    expected, at_max_len = model.initial_loss_probe(16), model.initial_loss_probe()
    monitor = InitialLossMonitor(warn=False)
    run = trainer(tmp_path, monitor, max_steps=2)
    run.fit(model, DataLoader(windows(300, count=64), batch_size=32))
    assert monitor.random_tokens == pytest.approx(expected, rel=1e-6) and expected != pytest.approx(at_max_len)
    # i.i.d. rows: the model's own estimate ([S]'s formula with its positions and scale) at that length
    assert monitor.random_tokens == pytest.approx(monitor.predicted_model, rel=0.05)
    assert float(run.callback_metrics["init_loss_random_tokens"]) == pytest.approx(expected, rel=1e-6)
    assert monitor.summary()["init_loss_random_tokens"] == monitor.state_dict()["random_tokens"]
    plain = InitialLossMonitor(track_steps=1)
    x, y = torch.randn(16, 5), torch.randint(0, 7, (16,))
    trainer(tmp_path, plain, max_steps=1).fit(Classifier(), DataLoader(TensorDataset(x, y), batch_size=8))
    assert plain.random_tokens is None and "init_loss_random_tokens" not in plain.summary()


def test_sequence_length_of_batches():
    ids = torch.zeros(4, 9, dtype=torch.long)
    assert sequence_length((ids, ids)) == sequence_length({"input_ids": ids}) == sequence_length(ids) == 9
    assert sequence_length(torch.zeros(4)) is None and sequence_length({"x": ids}) is None


def test_each_tracked_step_logs_its_loss_next_to_ln_vocab(tmp_path):
    model = TiedEmbeddingLM(vocab_size=300, architecture={"d_model": 32, "num_layers": 1, "max_len": 16})
    monitor = InitialLossMonitor(track_steps=3)
    logger = CSVLogger(tmp_path, name="csv")
    run = trainer(tmp_path, monitor, max_steps=5, logger=logger, log_every_n_steps=2)
    run.fit(model, DataLoader(windows(300), batch_size=2))  # log_every_n_steps does not thin the series
    with open(f"{logger.log_dir}/metrics.csv") as handle:
        logged = list(csv.DictReader(handle))
    rows = [r for r in logged if r.get("init_phase_loss")]
    assert [int(r["step"]) for r in rows] == [0, 1, 2]  # the tracked steps only, no stale repeats after them
    assert [float(r["init_phase_loss"]) for r in rows] == pytest.approx(monitor.step_losses, rel=1e-6)
    train_loss = next(float(r["train_loss"]) for r in logged if r.get("train_loss") and r["step"] == "1")
    assert train_loss == pytest.approx(monitor.step_losses[1], rel=1e-6)  # same step axis as train_loss
    assert all(float(r["ln_vocab"]) == pytest.approx(math.log(300)) for r in rows)
    assert [float(r["loss_over_ln_vocab"]) for r in rows] == pytest.approx(
        [v / math.log(300) for v in monitor.step_losses]
    )
    assert "local_init_loss" not in monitor.state_dict()


@pytest.mark.parametrize("log_every_n_steps", [1, 50])
def test_one_off_values_reach_the_logger_once_whatever_the_logging_interval(tmp_path, log_every_n_steps):
    model = TiedEmbeddingLM(vocab_size=300, architecture={"d_model": 32, "num_layers": 1, "max_len": 16})
    monitor = InitialLossMonitor(track_steps=2)
    logger = CSVLogger(tmp_path, name="csv")
    trainer(tmp_path, monitor, max_steps=4, logger=logger, log_every_n_steps=log_every_n_steps).fit(
        model, DataLoader(windows(300), batch_size=2)
    )
    with open(f"{logger.log_dir}/metrics.csv") as handle:
        logged = list(csv.DictReader(handle))
    for name in ("init_loss", "init_loss_ratio", "init_loss_predicted", "init_loss_predicted_model"):
        rows = [r for r in logged if r.get(name)]
        assert [int(r["step"]) for r in rows] == [0], name
    assert float(next(r for r in logged if r.get("init_loss"))["init_loss"]) == pytest.approx(
        monitor.init_loss, rel=1e-6
    )


def test_no_warning_when_start_is_near_ln_n(tmp_path):
    model = TiedEmbeddingLM(
        vocab_size=500,
        architecture={"d_model": 64, "num_layers": 1, "embedding_init": "log_n_over_d", "positional": "none"},
    )
    monitor = InitialLossMonitor()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer(tmp_path, monitor, max_steps=1).fit(model, DataLoader(windows(500), batch_size=4))
    assert not [w for w in caught if "initial loss" in str(w.message)]
    assert monitor.init_loss < monitor.ln_vocab + 1.0
    assert monitor.predicted == pytest.approx(model.initial_loss_prediction(), rel=0.05)


def test_gradient_accumulation_averages_the_pre_step_batches(tmp_path):
    torch.manual_seed(0)
    data = windows(300)
    model = TiedEmbeddingLM(
        vocab_size=300, architecture={"d_model": 32, "num_layers": 1, "max_len": 16, "embedding_init": "normal:0.2"}
    )
    with torch.no_grad():
        per_batch = [
            model.loss(model(data.tensors[0][i : i + 4]), data.tensors[1][i : i + 4]).item() for i in (0, 4, 8)
        ]
    monitor = InitialLossMonitor(track_steps=5)
    trainer(tmp_path, monitor, max_steps=2, accumulate_grad_batches=3).fit(model, DataLoader(data, batch_size=4))
    # the first optimizer step follows three batches, all computed with the initial weights
    assert monitor.init_loss == pytest.approx(sum(per_batch) / 3, rel=1e-5)
    assert len(monitor.step_losses) == 2


def test_state_survives_checkpoint_and_resume(tmp_path):
    model = TiedEmbeddingLM(vocab_size=300, architecture={"d_model": 32, "num_layers": 1, "max_len": 16})
    monitor = InitialLossMonitor(track_steps=6)
    loader = DataLoader(windows(300), batch_size=4)
    run = trainer(tmp_path, monitor, max_steps=3)
    run.fit(model, loader)
    path = tmp_path / "mid.ckpt"
    run.save_checkpoint(path)
    state = monitor.state_dict()
    assert len(state["step_losses"]) == 3 and state["init_loss"] == state["step_losses"][0]

    resumed = InitialLossMonitor(track_steps=6)
    trainer(tmp_path, resumed, max_steps=5).fit(
        TiedEmbeddingLM(vocab_size=300, architecture={"d_model": 32, "num_layers": 1, "max_len": 16}),
        loader,
        ckpt_path=path,
    )
    assert resumed.init_loss == monitor.init_loss and resumed.ln_vocab == monitor.ln_vocab
    assert resumed.step_losses[:3] == state["step_losses"] and len(resumed.step_losses) == 5

    fresh = InitialLossMonitor()
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state


def test_resume_without_monitor_state_does_not_remeasure(tmp_path):
    model = TiedEmbeddingLM(vocab_size=300, architecture={"d_model": 32, "num_layers": 1, "max_len": 16})
    loader = DataLoader(windows(300), batch_size=4)
    run = L.Trainer(
        max_steps=2, logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path
    )
    run.fit(model, loader)
    path = tmp_path / "plain.ckpt"
    run.save_checkpoint(path)
    late = InitialLossMonitor()
    trainer(tmp_path, late, max_steps=4).fit(model, loader, ckpt_path=path)
    assert late.init_loss is None and late.step_losses == []


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="vocab_size"):
        InitialLossMonitor(vocab_size=1)
    with pytest.raises(ValueError, match="track_steps"):
        InitialLossMonitor(track_steps=0)


@pytest.mark.parametrize("seed", [0, 1])
def test_rows_sharing_a_direction_are_named_as_the_cause_when_their_spread_is_small(tmp_path, seed):
    """A tied table at Xavier-like σ (dσ < ln n) whose rows share one direction: [S]'s formula says ≈ ln n, the
    model's loss on random tokens is far above it, and the warning names the shared directions and their transforms
    (not a large σ, which it is not)."""
    generator = torch.Generator().manual_seed(seed)
    vocabulary = ["<pad>", "<unk>", "<bos>", "<eos>", *(f"w{i}" for i in range(296))]
    model = TiedEmbeddingLM(vocabulary=vocabulary, architecture={"d_model": 256, "num_layers": 1, "max_len": 32})
    direction = torch.randn(256, generator=generator)
    rows = 3 * torch.randn(300, 1, generator=generator) * direction + 0.05 * torch.randn(300, 256, generator=generator)
    with torch.no_grad():  # σ = 0.02: dσ = 5.1 < ln n = 5.7, so [S]'s formula says the start is near ln n
        model.model.token_embedding.weight.copy_(rows / rows.std() * 0.02)
    monitor = InitialLossMonitor()
    with pytest.warns(UserWarning, match="whose rows share directions") as caught:
        trainer(tmp_path, monitor, max_steps=1).fit(model, DataLoader(windows(300, count=16), batch_size=16))
    message = str([w for w in caught if "share directions" in str(w.message)][0].message)
    assert monitor.shares_directions() and monitor.random_tokens > monitor.predicted + 1
    assert f"[S]'s {monitor.predicted:.3f}" in message and f"random tokens is {monitor.random_tokens:.3f}" in message
    assert "transforms=['remove_top']" in message and "log_n_over_d" not in message
