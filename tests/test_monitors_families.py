"""The monitors on models of known families measure the model as it runs: the token table, the input scale and the
positions the model really adds (read by a hook on its own forward pass), the model's own loss; a model that adds no
positions says so in the logged keys instead of leaving numbers out."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
import transformers as T

from lightning_embinit import EmbeddingVarianceMonitor, InitialLossMonitor, LexicalProbe
from lightning_embinit.diagnostics.lexical import lexical_probe
from tests.family_models import CASES, HF_CASES, Holder, V, first_layer_input
from tests.family_models import L as MAX_LEN


def _population_std(values: torch.Tensor) -> float:
    values = values.double().flatten()
    return float(((values - values.mean()) ** 2).mean().sqrt())


def _added_positions(model: torch.nn.Module, name: str, scale: float, table: torch.Tensor) -> torch.Tensor:
    """P, row by row, as the model adds it: its first layer's input for ids at positions 0..L−1 minus s·E[ids]."""
    length = MAX_LEN - 2 if name == "roberta" else MAX_LEN
    ids = torch.randint(3, V, (1, length), generator=torch.Generator().manual_seed(0))
    return first_layer_input(model, CASES[name], ids)[0] - scale * table[ids[0]]


@pytest.mark.parametrize(("name", "scale"), [("gpt2", 1.0), ("bert", 1.0), ("opt", 1.0), ("bart", math.sqrt(32))])
def test_the_variance_monitor_measures_the_models_own_table_scale_and_positions(name, scale):
    model = HF_CASES[name].build()
    table = model.get_input_embeddings().weight.detach()
    padding = model.get_input_embeddings().padding_idx
    rows = torch.cat([table[:padding], table[padding + 1 :]]) if padding is not None else table
    positions = _added_positions(model, name, scale, table)
    values = next(iter(EmbeddingVarianceMonitor(sample_rows=64).measure(Holder(model)).values()))
    assert values["std"] == pytest.approx(_population_std(rows), rel=1e-6)
    assert values["scaled_std"] == pytest.approx(scale * _population_std(rows), rel=1e-6)
    assert values["pe_std"] == pytest.approx(_population_std(positions), rel=1e-4)
    assert values["ratio"] == pytest.approx(scale * _population_std(rows) / _population_std(positions), rel=1e-4)
    assert values["semantic_retention"] is not None and "no_additive_positional_encoding" not in values


@pytest.mark.parametrize("name", ["llama", "t5", "torchtune", "litgpt"])
def test_a_model_without_additive_positions_says_so(name, caplog):
    model = CASES[name].build()
    values = next(iter(EmbeddingVarianceMonitor().measure(Holder(model)).values()))
    assert values["no_additive_positional_encoding"] == 1.0
    assert values["pe_std"] is None and values["ratio"] is None and values["semantic_retention"] is None
    assert values["scaled_std"] == pytest.approx(CASES[name].scale * values["std"], rel=1e-6)


class OwnLoss(L.LightningModule):
    """A user's LightningModule around a Hugging Face model that returns the model's own loss."""

    def __init__(self, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.model, self.batch = model, batch

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.model(**batch).loss

    def train_dataloader(self):
        return torch.utils.data.DataLoader([self.batch] * 2, batch_size=None)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


def _fit(module: L.LightningModule, callbacks: list, tmp_path) -> L.Trainer:
    trainer = L.Trainer(
        max_steps=2,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module)
    return trainer


def _causal_and_masked():
    torch.manual_seed(0)
    gpt2 = T.GPT2LMHeadModel(
        T.GPT2Config(
            vocab_size=V, n_embd=32, n_layer=1, n_head=2, n_positions=MAX_LEN, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0
        )
    )
    bert = T.BertForMaskedLM(
        T.BertConfig(
            vocab_size=V,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
    )
    ids = torch.randint(3, V, (4, 16), generator=torch.Generator().manual_seed(1))
    masked_labels = torch.where(torch.rand(ids.shape, generator=torch.Generator().manual_seed(2)) < 0.3, ids, -100)
    return [
        (gpt2, {"input_ids": ids, "labels": ids}, gpt2.transformer.wte),
        (bert, {"input_ids": ids, "labels": masked_labels}, bert.bert.embeddings.word_embeddings),
    ]


@pytest.mark.parametrize("case", [0, 1], ids=["causal", "masked"])
def test_the_initial_loss_monitor_reads_a_hugging_face_models_own_loss(case, tmp_path):
    model, batch, table = _causal_and_masked()[case]
    model.train()
    with torch.no_grad():
        expected = float(model(**batch).loss)
    padding = table.padding_idx
    rows = (
        table.weight.detach() if padding is None else torch.cat([table.weight[:padding], table.weight[padding + 1 :]])
    )
    sigma = _population_std(rows.detach())
    monitor = InitialLossMonitor(track_steps=2)
    _fit(OwnLoss(model, batch), [monitor], tmp_path)
    assert monitor.init_loss == pytest.approx(expected, rel=1e-5)
    assert monitor.ln_vocab == pytest.approx(math.log(V))
    assert monitor.predicted == pytest.approx(math.log(math.exp(32 * sigma) + V - 1), rel=1e-6)  # tied: [S]
    assert len(monitor.step_losses) == 2 and monitor.step_losses[1] < monitor.step_losses[0]


def test_a_rotary_model_logs_the_no_positions_key_and_untied_n_from_its_head(tmp_path, caplog):
    model = HF_CASES["llama"].build()
    ids = torch.randint(3, V, (2, 8), generator=torch.Generator().manual_seed(0))
    variance, initial = EmbeddingVarianceMonitor(every_n_steps=None, figures=False), InitialLossMonitor(track_steps=1)
    with caplog.at_level("INFO"):
        _fit(OwnLoss(model, {"input_ids": ids, "labels": ids}), [variance, initial], tmp_path)
    summary = variance.summary()
    assert summary["embvar/model.model.embed_tokens/no_additive_positional_encoding"] == 1.0
    assert not any(key.endswith("/ratio") for key in summary)
    assert "no additive positional encoding (rotary embeddings in attention)" in caplog.text
    assert initial.predicted is None and initial.ln_vocab == pytest.approx(math.log(V))  # untied: n from lm_head


@pytest.fixture(scope="module")
def similarity_file(tmp_path_factory):
    """Word pairs over the tiny vocabulary with made-up ratings: enough for a Spearman ρ."""
    generator = torch.Generator().manual_seed(3)
    pairs = torch.randint(3, V, (60, 2), generator=generator)
    path = tmp_path_factory.mktemp("probe") / "pairs.tsv"
    lines = [
        f"tok{a}\ttok{b}\t{float(r):.2f}" for (a, b), r in zip(pairs.tolist(), torch.rand(60, generator=generator))
    ]
    path.write_text("\n".join(line for line in lines if line.split("\t")[0] != line.split("\t")[1]) + "\n")
    return path


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_the_lexical_probe_adds_the_models_positions_or_skips_the_chains_with_p(name, similarity_file):
    model = HF_CASES[name].build()
    holder = Holder(model)
    holder.vocabulary = [f"tok{i}" for i in range(V)]
    chains = ("raw", "scaled", "scaled+pe")
    probe = LexicalProbe(similarity=[str(similarity_file)], chains=chains, figures=False, verbose=False)
    results = probe.probe(holder)
    table = model.get_input_embeddings().weight.detach()
    if name == "llama":
        assert list(results) == ["raw", "scaled"] and probe.skipped_chains == ("scaled+pe",)
        assert (
            probe._scalars("backbone.model.embed_tokens", results)[
                "lexical/backbone.model.embed_tokens/no_additive_positional_encoding"
            ]
            == 1.0
        )
        return
    positions = model.transformer.wpe.weight.detach()
    reference = lexical_probe(
        table,
        holder.vocabulary,
        similarity=[str(similarity_file)],
        chains=chains,
        input_scale=1.0,
        positional=positions,
    )
    assert results == reference


def test_the_variance_monitor_sees_the_decoders_own_table_with_its_positions():
    """Marian without shared embeddings: both tables are measured, each with the positions its side adds."""
    from tests.test_callback_families import _two_table_marian

    model = _two_table_marian().eval()
    measured = EmbeddingVarianceMonitor(sample_rows=32).measure(Holder(model))
    assert list(measured) == ["backbone.model.encoder.embed_tokens", "backbone.model.decoder.embed_tokens"]
    for side, values in zip(("encoder", "decoder"), measured.values()):
        positions = getattr(model.model, side).embed_positions.weight.detach()
        assert values["pe_std"] == pytest.approx(_population_std(positions), rel=1e-5)
