"""TiedEmbeddingLM: causality, heads, the initial loss of [S] (docs/concepts.md#tied-head), slots, optimizer and
checkpoints."""

import math

import lightning as L
import pytest
import torch

from lightning_embinit.data import LanguageModelDataModule
from lightning_embinit.init import EmbeddingHost
from lightning_embinit.models import HEADS, TiedEmbeddingLM, tied_initial_loss
from lightning_embinit.models.optimization import noam_factor

WORDS = "the cat sat on the mat and the dog sat on the log while a bird sang in the tree".split()


def tiny(head="tied", optimizer=None, **architecture):
    architecture = {"d_model": 32, "num_heads": 4, "num_layers": 2, "max_len": 16, "head": head, **architecture}
    return TiedEmbeddingLM(vocab_size=23, architecture=architecture, optimizer=optimizer or {})


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "none"])
@pytest.mark.parametrize("head", HEADS)
def test_future_tokens_never_change_earlier_logits(head, positional):
    torch.manual_seed(0)
    model = tiny(head, positional=positional, zero_init_residual=False).eval()
    ids = torch.randint(0, 23, (2, 10))
    logits = model(ids)
    for t in (3, 7):
        changed = ids.clone()
        changed[:, t:] = (changed[:, t:] + 5) % 23
        torch.testing.assert_close(model(changed)[:, :t], logits[:, :t])
        assert not torch.allclose(model(changed)[:, t], logits[:, t])


@pytest.mark.parametrize("head", HEADS)
def test_each_head_overfits_a_tiny_batch(head):
    torch.manual_seed(0)
    model = tiny(
        head, optimizer={"lr": 1e-2}, head_activation="gelu" if head == "tied_orthogonal" else "none", head_bias=True
    )
    ids = torch.randint(0, 23, (4, 13))
    optimizer = model.configure_optimizers()
    for _ in range(150):
        loss = model.loss(model(ids[:, :-1]), ids[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.1, f"{head}: loss {loss.item():.3f} after 150 steps"


def _initial_loss(model, n, batches=8):
    torch.manual_seed(1)
    ids = torch.randint(0, n, (batches, 129))
    with torch.no_grad():
        return model.loss(model(ids[:, :-1]), ids[:, 1:]).item()


@pytest.mark.parametrize("d", [256, 384])
@pytest.mark.parametrize("sigma_kind", ["inv_sqrt_d", "ln_n_over_d"])
def test_tied_initial_loss_matches_spec_formula(d, sigma_kind):
    n = 3000
    sigma = 1 / math.sqrt(d) if sigma_kind == "inv_sqrt_d" else math.log(n) / d
    torch.manual_seed(0)
    model = TiedEmbeddingLM(
        vocab_size=n,
        architecture={
            "d_model": d,
            "num_layers": 2,
            "num_heads": 4,
            "positional": "none",
            "embedding_init": f"normal:{sigma}",
        },
    )
    measured = _initial_loss(model, n)
    predicted = tied_initial_loss(n, d, sigma)
    assert abs(measured - predicted) / predicted < 0.03, (measured, predicted)
    assert abs(measured - model.initial_loss_prediction()) / measured < 0.03
    if sigma_kind == "inv_sqrt_d":
        assert measured > math.log(n) + 5  # ≈ √d, far above ln n


@pytest.mark.parametrize("head", ["untied", "tied_half_swap", "tied_shuffle", "tied_orthogonal"])
def test_untied_and_decorrelated_heads_start_near_ln_n(head):
    n, d = 3000, 256
    torch.manual_seed(0)
    model = TiedEmbeddingLM(
        vocab_size=n, architecture={"d_model": d, "num_layers": 2, "head": head, "embedding_init": f"normal:{d**-0.5}"}
    )
    measured = _initial_loss(model, n)
    assert math.log(n) - 0.1 < measured < math.log(n) + 0.6
    assert abs(measured - model.initial_loss_prediction()) / measured < 0.03


def test_prediction_accounts_for_positional_encoding():
    n, d = 3000, 256
    torch.manual_seed(0)
    model = TiedEmbeddingLM(
        vocab_size=n, architecture={"d_model": d, "max_len": 128, "embedding_init": f"normal:{d**-0.5}"}
    )
    measured = _initial_loss(model, n)
    assert abs(measured - model.initial_loss_prediction(length=128)) / measured < 0.03
    assert TiedEmbeddingLM(vocab_size=n, architecture={"zero_init_residual": False}).initial_loss_prediction() is None


@pytest.mark.parametrize("head", ["tied", "tied_orthogonal"])
def test_bf16_autocast_training_step_on_cpu(head):
    """A whole optimizer step under CPU bf16 autocast: finite loss and gradients, weights move."""
    torch.manual_seed(0)
    model = tiny(head)
    optimizer = model.configure_optimizers()
    ids = torch.randint(0, 23, (4, 9))
    before = model.model.token_embedding.weight.detach().clone()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(ids[:, :-1])
        loss = model.loss(logits, ids[:, 1:])
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32  # cross-entropy autocasts to fp32
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    optimizer.step()
    assert model.model.token_embedding.weight.dtype == torch.float32 and not torch.equal(
        model.model.token_embedding.weight, before
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_moves_to_cuda_and_trains_a_step():
    torch.manual_seed(0)
    model = tiny("tied_orthogonal", positional="sinusoidal").cuda()
    assert all(t.device.type == "cuda" for t in [*model.parameters(), *model.buffers()])
    ids = torch.randint(0, 23, (4, 9), device="cuda")
    optimizer = model.configure_optimizers()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model.loss(model(ids[:, :-1]), ids[:, 1:])
    loss.backward()
    optimizer.step()
    assert loss.device.type == "cuda" and torch.isfinite(loss)
    assert model.initial_loss_prediction(length=8) is not None


def test_fits_under_bf16_mixed_precision(tmp_path):
    ids = torch.randint(0, 23, (8, 9))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids[:, :-1], ids[:, 1:]), batch_size=4)
    trainer = L.Trainer(
        precision="bf16-mixed",
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(tiny(), loader, loader)
    metrics = trainer.callback_metrics
    assert all(torch.isfinite(metrics[k]) for k in ("train_loss", "train_loss_epoch", "val_loss", "val_ppl"))


def test_embedding_slot_and_vocabulary():
    vocab = ["<pad>", "<unk>", "<bos>", "<eos>", *dict.fromkeys(WORDS)]
    model = TiedEmbeddingLM(
        vocabulary=vocab, architecture={"d_model": 32, "num_heads": 4, "num_layers": 1, "max_len": 16}
    )
    assert isinstance(model, EmbeddingHost)
    slot = model.embedding_slots()["tokens"]
    assert list(slot.tokens) == vocab and slot.padding_idx == 0 and slot.input_scale == pytest.approx(math.sqrt(32))
    assert slot.tied_modules == ("model.head",) and slot.special_tokens["eos"] == "<eos>"
    assert slot.positional_encoding().shape == (16, 32)
    assert model.model.token_embedding.weight[0].abs().max() == 0
    untied = TiedEmbeddingLM(
        vocabulary=vocab,
        architecture={"d_model": 32, "num_heads": 4, "head": "untied", "positional": "none", "embedding_scale": 1.0},
    )
    slot = untied.embedding_slots()["tokens"]
    assert slot.tied_modules == () and slot.positional_encoding is None and slot.input_scale == 1.0
    with pytest.raises(ValueError, match="disagrees"):
        TiedEmbeddingLM(vocabulary=vocab, vocab_size=3)
    with pytest.raises(ValueError, match="vocabulary"):
        TiedEmbeddingLM()
    with pytest.raises(ValueError, match="output head"):
        tiny("tied_twice")
    with pytest.raises(ValueError, match="even"):
        tiny("tied_half_swap", d_model=33, num_heads=3)
    with pytest.raises(ValueError, match="max_len"):
        tiny()(torch.zeros(1, 17, dtype=torch.long))


def test_optimizer_and_noam_schedule():
    model = tiny(optimizer={"lr_schedule": "noam", "warmup_steps": 10, "lr": 0.5})
    config = model.configure_optimizers()
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9
    assert config["lr_scheduler"]["interval"] == "step"
    rates = []
    for _ in range(40):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates[0] == pytest.approx(0.5 * noam_factor(0, 10)) and max(rates) == pytest.approx(0.5)
    assert rates.index(max(rates)) == 9 and rates[39] == pytest.approx(0.5 * math.sqrt(10 / 40))
    assert noam_factor(3, 10) == pytest.approx(4 * 10**-1.5 * math.sqrt(10))


def test_checkpoint_reloads_with_vocabulary_and_same_validation_loss(tmp_path):
    text = tmp_path / "train.txt"
    text.write_text("\n".join(" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))) + "\n")
    L.seed_everything(0)
    data = LanguageModelDataModule(train_files=str(text), seq_len=8, batch_size=4, min_freq=1, val_fraction=0.2)
    model = TiedEmbeddingLM(
        vocabulary=data.vocabulary,
        architecture={"d_model": 32, "num_heads": 4, "num_layers": 1, "max_len": 8, "head": "tied_orthogonal"},
    )
    trainer = L.Trainer(
        max_steps=5, default_root_dir=tmp_path, logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(model, data)
    before = trainer.validate(model, data, verbose=False)[0]
    path = tmp_path / "lm.ckpt"
    trainer.save_checkpoint(path)
    loaded = TiedEmbeddingLM.load_from_checkpoint(path)
    assert loaded.vocabulary == data.vocabulary
    assert list(loaded.embedding_slots()["tokens"].tokens) == data.vocabulary
    torch.testing.assert_close(loaded.model.token_embedding.weight, model.model.token_embedding.weight)
    after = L.Trainer(logger=False, enable_progress_bar=False).validate(loaded, data, verbose=False)[0]
    assert after["val_loss"] == pytest.approx(before["val_loss"], rel=1e-6)
    assert after["val_ppl"] == pytest.approx(math.exp(before["val_loss"]), rel=1e-5)
