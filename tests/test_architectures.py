"""The plain-torch architectures on their own (no Lightning): built from a config, trained in a plain loop,
initialized through the torch-only API; and the settings groups the Lightning systems build them from."""

from __future__ import annotations

import inspect
import math
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from lightning_embinit import initialize_embeddings
from lightning_embinit.architectures import (
    CausalLM,
    CausalLMConfig,
    EncoderClassifier,
    EncoderClassifierConfig,
    EncoderDecoder,
    EncoderDecoderConfig,
    ReinforcedEncoderDecoder,
    ReinforcedEncoderDecoderConfig,
)
from lightning_embinit.init import EmbeddingHost
from lightning_embinit.models import (
    ReinforcedTransformerSeq2Seq,
    TiedEmbeddingLM,
    TransformerClassifier,
    TransformerSeq2Seq,
)
from lightning_embinit.vocabulary import Vocabulary

VOCAB = 24
SMALL = {"d_model": 32, "num_heads": 4, "ffn_dim": 64, "dropout": 0.0, "max_len": 32}


def copy_task(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(src, tgt): tgt is bos + src + eos, the package's ids (pad 0, unk 1, bos 2, eos 3)."""
    body = torch.randint(4, VOCAB, (16, 6), generator=generator)
    src = torch.cat((body, torch.full((16, 1), 3)), dim=1)
    return src, torch.cat((torch.full((16, 1), 2), body, torch.full((16, 1), 3)), dim=1)


def seq2seq_loss(model, generator):
    src, tgt = copy_task(generator)
    return F.cross_entropy(model(src, tgt[:, :-1]).flatten(0, 1), tgt[:, 1:].flatten())


def classifier_loss(model, generator):
    labels = torch.randint(0, 2, (16,), generator=generator)
    half = (VOCAB - 4) // 2
    ids = 4 + labels[:, None] * half + torch.randint(0, half, (16, 8), generator=generator)  # class 1: the upper half
    return F.cross_entropy(model(ids), labels)


def lm_loss(model, generator):
    start = torch.randint(4, VOCAB, (16, 1), generator=generator)
    ids = 4 + (start - 4 + torch.arange(10)) % (VOCAB - 4)  # counting upwards: each token predicts the next
    return F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())


ARCHITECTURES = {
    "encoder_decoder": (
        lambda: EncoderDecoder(EncoderDecoderConfig(**SMALL, num_encoder_layers=1, num_decoder_layers=1), VOCAB, VOCAB),
        seq2seq_loss,
    ),
    "reinforced": (
        lambda: ReinforcedEncoderDecoder(
            ReinforcedEncoderDecoderConfig(**{**SMALL, "d_model": 16}, num_encoder_layers=1, num_decoder_layers=1),
            VOCAB,
            VOCAB,
        ),
        seq2seq_loss,
    ),
    "classifier": (
        lambda: EncoderClassifier(EncoderClassifierConfig(**SMALL, num_layers=1, pooling="mean"), VOCAB, 2),
        classifier_loss,
    ),
    "causal_lm": (lambda: CausalLM(CausalLMConfig(**SMALL, num_layers=1), VOCAB), lm_loss),
}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_each_architecture_trains_in_a_plain_torch_loop(name, seed):
    build, loss_of = ARCHITECTURES[name]
    torch.manual_seed(seed)
    model = build()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(100):
        loss = loss_of(model, generator)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert math.isfinite(last) and last < 0.6 * first, (name, seed, first, last)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_the_torch_only_initialization_api_fills_each_architecture(name):
    build, _ = ARCHITECTURES[name]
    torch.manual_seed(0)
    model = build()
    assert isinstance(model, EmbeddingHost)
    reports = initialize_embeddings(model, source="normal:0.3", standardize="xavier", seed=0)
    assert set(reports) == set(model.embedding_slots())
    for slot in model.embedding_slots().values():
        rows = slot.weight.detach()
        if slot.padding_idx is not None:
            assert rows[slot.padding_idx].abs().max() == 0
            rows = torch.cat((rows[: slot.padding_idx], rows[slot.padding_idx + 1 :]))
        target = math.sqrt(2.0 / sum(slot.weight.shape))  # Xavier's std for the table's shape ([K])
        assert rows.std().item() == pytest.approx(target, rel=0.02)


SYSTEMS = {
    TransformerSeq2Seq: {"src_vocab_size": VOCAB, "tgt_vocab_size": VOCAB},
    ReinforcedTransformerSeq2Seq: {"src_vocab_size": VOCAB, "tgt_vocab_size": VOCAB},
    TransformerClassifier: {"vocab_size": VOCAB, "num_classes": 2},
    TiedEmbeddingLM: {"vocab_size": VOCAB},
}


@pytest.mark.parametrize("system", SYSTEMS, ids=lambda s: s.__name__)
def test_groups_as_configs_or_mappings_build_the_same_system_and_its_hyperparameters_rebuild_it(system):
    own = SYSTEMS[system]
    defaults = inspect.signature(system).parameters  # a group given as a mapping applies to the system's default
    torch.manual_seed(3)
    grouped = system(
        **own,
        architecture=replace(defaults["architecture"].default, d_model=16, num_heads=2, dropout=0.0),
        optimizer=replace(defaults["optimizer"].default, lr=5e-4, warmup_steps=100),
    )
    torch.manual_seed(3)
    mapping = system(
        **own, architecture={"d_model": 16, "num_heads": 2, "dropout": 0.0}, optimizer={"lr": 5e-4, "warmup_steps": 100}
    )
    torch.manual_seed(3)
    rebuilt = system(**mapping.hparams)
    for other in (mapping, rebuilt):
        assert dict(other.hparams) == dict(grouped.hparams)
        assert other.model.config == grouped.model.config and other.optimizer_config == grouped.optimizer_config
        for (name, a), (_, b) in zip(grouped.state_dict().items(), other.state_dict().items()):
            assert torch.equal(a, b), name
    assert (
        grouped.hparams.architecture == asdict(grouped.model.config) and grouped.hparams.architecture["d_model"] == 16
    )
    assert grouped.hparams.optimizer == asdict(grouped.optimizer_config) and grouped.hparams.optimizer["lr"] == 5e-4


@pytest.mark.parametrize("system", SYSTEMS, ids=lambda s: s.__name__)
def test_settings_outside_their_group_are_refused(system):
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'd_model'"):
        system(**SYSTEMS[system], d_model=16)
    with pytest.raises(ValueError, match=r"architecture: \w+Config has no field\(s\) \['lr'\]; fields: d_model"):
        system(**SYSTEMS[system], architecture={"lr": 1e-3})
    with pytest.raises(TypeError, match=r"optimizer must be a OptimizerConfig or a mapping of its fields, got int"):
        system(**SYSTEMS[system], optimizer=3)
    with pytest.raises(ValueError, match="unknown activation 'swish'; choose one of: relu, gelu"):
        system(**SYSTEMS[system], architecture={"activation": "swish"})


def test_loggers_get_the_groups_flattened_and_the_checkpoint_reloads_them(tmp_path):
    from lightning import Trainer
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData
    from torch.utils.data import DataLoader, TensorDataset

    model = TiedEmbeddingLM(vocab_size=VOCAB, architecture={"d_model": 16, "num_heads": 2, "max_len": 8})
    loggers = [TensorBoardLogger(tmp_path, name="tb"), CSVLogger(tmp_path, name="csv")]
    ids = torch.randint(4, VOCAB, (4, 9))
    trainer = Trainer(
        default_root_dir=tmp_path,
        max_steps=1,
        logger=loggers,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, DataLoader(TensorDataset(ids[:, :-1], ids[:, 1:]), batch_size=2))
    events = EventAccumulator(loggers[0].log_dir)
    events.Reload()
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    logged = HParamsPluginData.FromString(content).session_start_info.hparams
    assert logged["architecture/d_model"].number_value == 16 and logged["optimizer/lr"].number_value == 1e-3
    assert logged["architecture/head"].string_value == "tied" and "vocabulary" not in logged
    written = yaml.unsafe_load(Path(loggers[1].log_dir, "hparams.yaml").read_text())  # the groups as YAML mappings
    assert written["architecture"] == model.hparams.architecture and written["optimizer"]["lr"] == 1e-3
    path = tmp_path / "lm.ckpt"
    trainer.save_checkpoint(path)
    saved = torch.load(path, weights_only=True)  # plain data: no class of the package in the file
    assert saved["hyper_parameters"]["architecture"] == model.hparams.architecture
    assert TiedEmbeddingLM.load_from_checkpoint(path).hparams == model.hparams


def test_a_decoder_side_without_its_special_ids_is_refused_with_the_missing_roles():
    config = EncoderDecoderConfig(**SMALL)
    with pytest.raises(
        ValueError, match=r"EncoderDecoder's target side needs the special-token ids \['pad', 'bos', 'eos'\]"
    ):
        EncoderDecoder(config, VOCAB, Vocabulary.sized(VOCAB))
    tokens = ["<pad>", "<unk>", "<bos>", "<eos>", *(f"w{i}" for i in range(VOCAB - 4))]
    model = EncoderDecoder(config, Vocabulary.from_tokens(tokens), Vocabulary.from_tokens(tokens))
    assert (model.pad_id, model.bos_id, model.eos_id) == (0, 2, 3)
    assert list(model.embedding_slots()["src"].tokens) == tokens
