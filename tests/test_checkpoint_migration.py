"""Checkpoints of 0.1.0.dev0 (weights on the system itself, not under ``model.``) load into today's systems and
give the outputs the old code gave (fixtures written by that code: tests/fixtures/checkpoints_0_1_0_dev0)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from lightning_embinit.models import (
    ReinforcedTransformerSeq2Seq,
    TiedEmbeddingLM,
    TransformerClassifier,
    TransformerSeq2Seq,
)
from lightning_embinit.models.module import CHECKPOINT_LAYOUT, CHECKPOINT_LAYOUT_KEY

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints_0_1_0_dev0"
SYSTEMS = {
    "tied_lm": TiedEmbeddingLM,
    "seq2seq": TransformerSeq2Seq,
    "reinforced": ReinforcedTransformerSeq2Seq,
    "classifier": TransformerClassifier,
}


@pytest.mark.parametrize("name", SYSTEMS)
def test_a_0_1_0_dev0_checkpoint_loads_and_gives_the_old_outputs(name):
    old = torch.load(FIXTURES / f"{name}.ckpt", weights_only=False)
    assert CHECKPOINT_LAYOUT_KEY not in old and not any(key.startswith("model.") for key in old["state_dict"])
    model = SYSTEMS[name].load_from_checkpoint(FIXTURES / f"{name}.ckpt", map_location="cpu").eval()
    reference = torch.load(FIXTURES / f"{name}.outputs.pt", weights_only=True)
    with torch.no_grad():
        torch.testing.assert_close(model(*reference["inputs"]), reference["output"], rtol=0, atol=0)
    assert len(model.state_dict()) == len(old["state_dict"])


def test_training_resumes_from_a_0_1_0_dev0_checkpoint_and_saves_todays_layout(tmp_path):
    reference = torch.load(FIXTURES / "tied_lm.outputs.pt", weights_only=True)
    (src,) = reference["inputs"]
    model = TiedEmbeddingLM(
        vocabulary=["<pad>", "<unk>", "<bos>", "<eos>"] + [f"w{i}" for i in range(8)],
        d_model=8,
        num_heads=2,
        num_layers=1,
        ffn_dim=16,
        max_len=8,
    )
    trainer = L.Trainer(
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(model, DataLoader([(src[:, :-1], src[:, 1:])], batch_size=None), ckpt_path=FIXTURES / "tied_lm.ckpt")
    assert trainer.global_step == 2  # the old run's step and optimizer state came back
    trainer.save_checkpoint(tmp_path / "today.ckpt")
    saved = torch.load(tmp_path / "today.ckpt", weights_only=False)
    assert saved[CHECKPOINT_LAYOUT_KEY] == CHECKPOINT_LAYOUT and all(
        key.startswith("model.") for key in saved["state_dict"]
    )
    reloaded = TiedEmbeddingLM.load_from_checkpoint(tmp_path / "today.ckpt")
    for key, value in model.state_dict().items():
        torch.testing.assert_close(reloaded.state_dict()[key], value)
