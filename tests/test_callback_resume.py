"""Resume detection is safe when Lightning's internals move (issue 7 §6)."""

from __future__ import annotations

import pytest
import torch

from lightning_embinit import EmbeddingInitCallback
from lightning_embinit.callbacks import embedding_init, lightning_internals
from lightning_embinit.callbacks.lightning_internals import LightningInternalsWarning
from tests.host_models import TwoSlotHost, make_trainer, token_loader
from tests.sources_for_tests import CountingSource


def checkpoint_after_fit(tmp_path):
    trainer = make_trainer(tmp_path, [EmbeddingInitCallback(source="xavier", seed=0, verbose=False)], max_steps=2)
    trainer.fit(TwoSlotHost(lr=0.5), token_loader())
    path = tmp_path / "run.ckpt"
    trainer.save_checkpoint(path)
    return path


def test_the_private_frame_exists_in_this_lightning(tmp_path):
    """Under the test suite a missing frame is an error (pyproject filterwarnings), so this fit proves it is found."""
    callback = EmbeddingInitCallback(source="ones", verbose=False)
    model = TwoSlotHost(lr=0.0)
    make_trainer(tmp_path, [callback]).fit(model, token_loader())
    assert not callback.resumed and torch.all(model.encoder_embedding.weight[1:] == 1)


def test_a_missing_frame_warns_and_builds_a_fresh_fit(tmp_path, monkeypatch):
    monkeypatch.setattr(lightning_internals, "FIT_RUN_FRAME", "_a_renamed_run")
    source = CountingSource("ones")
    model = TwoSlotHost(lr=0.0)
    with pytest.warns(LightningInternalsWarning, match="cannot tell whether this fit resumes"):
        make_trainer(tmp_path, [EmbeddingInitCallback(source=source, verbose=False)]).fit(model, token_loader())
    assert source.builds == 2 and torch.all(model.encoder_embedding.weight[1:] == 1)


def test_a_missing_frame_on_resume_still_ends_with_the_checkpoints_weights_and_report(tmp_path, monkeypatch):
    path = checkpoint_after_fit(tmp_path)
    saved = torch.load(path, weights_only=False)["state_dict"]
    monkeypatch.setattr(lightning_internals, "FIT_RUN_FRAME", "_a_renamed_run")
    callback = EmbeddingInitCallback(source="ones", verbose=False)
    model = TwoSlotHost(lr=0.0)
    with pytest.warns(LightningInternalsWarning):
        make_trainer(tmp_path, [callback], max_steps=2).fit(model, token_loader(), ckpt_path=path)
    assert callback.resumed
    assert torch.equal(model.encoder_embedding.weight, saved["encoder_embedding.weight"])
    assert callback.reports["encoder"]["source"] == "xavier"


def test_a_resume_that_lightning_never_restores_fails_before_training(tmp_path, monkeypatch):
    monkeypatch.setattr(embedding_init, "running_fit_checkpoint", lambda trainer: "/claimed/by/a/changed/frame.ckpt")
    model = TwoSlotHost(lr=0.5)
    before = model.encoder_embedding.weight.detach().clone()
    with pytest.raises(
        RuntimeError, match="was to resume from /claimed/by/a/changed/frame.ckpt, but Lightning restored"
    ):
        make_trainer(tmp_path, [EmbeddingInitCallback(source="ones", verbose=False)]).fit(model, token_loader())
    assert torch.equal(model.encoder_embedding.weight, before)


def test_a_fresh_fit_after_validate_with_a_checkpoint_initializes(tmp_path):
    path = checkpoint_after_fit(tmp_path)
    source = CountingSource("ones")
    trainer = make_trainer(tmp_path, [EmbeddingInitCallback(source=source, verbose=False)], max_steps=1)
    trainer.validate(TwoSlotHost(), token_loader(), ckpt_path=path, verbose=False)
    assert trainer.ckpt_path is not None  # stale: the reason the callback does not read it
    fresh = TwoSlotHost(lr=0.0)
    trainer.fit(fresh, token_loader())
    assert source.builds == 2 and torch.all(fresh.encoder_embedding.weight[1:] == 1)


def test_strategies_that_restore_after_setup_resume_too(tmp_path):
    """FSDP, DeepSpeed and ModelParallelStrategy restore after on_fit_start; the check waits for on_train_start."""
    from lightning.pytorch.strategies import SingleDeviceStrategy

    class RestoreAfterSetup(SingleDeviceStrategy):
        @property
        def restore_checkpoint_after_setup(self) -> bool:
            return True

    path = checkpoint_after_fit(tmp_path)
    saved = torch.load(path, weights_only=False)["state_dict"]
    callback = EmbeddingInitCallback(source="ones", verbose=False)
    model = TwoSlotHost(lr=0.0)
    make_trainer(tmp_path, [callback], max_steps=2, strategy=RestoreAfterSetup(device=torch.device("cpu"))).fit(
        model, token_loader(), ckpt_path=path
    )
    assert callback.resumed and torch.equal(model.encoder_embedding.weight, saved["encoder_embedding.weight"])
