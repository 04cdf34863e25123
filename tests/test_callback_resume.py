"""Resume through public Lightning API only: the build at setup is replaced by the restore, and the hook order is
confirmed at on_train_start through ``trainer.ckpt_path`` (callbacks/lifecycle.py)."""

from __future__ import annotations

import pytest
import torch

from lightning_embinit import EmbeddingInitCallback
from tests.host_models import TwoSlotHost, make_trainer, token_loader
from tests.sources_for_tests import CountingSource


def checkpoint_after_fit(tmp_path):
    trainer = make_trainer(tmp_path, [EmbeddingInitCallback(source="xavier", seed=0, verbose=False)], max_steps=2)
    trainer.fit(TwoSlotHost(lr=0.5), token_loader())
    path = tmp_path / "run.ckpt"
    trainer.save_checkpoint(path)
    return path


def test_a_fresh_fit_builds_and_is_not_a_resume(tmp_path):
    callback = EmbeddingInitCallback(source="ones", verbose=False)
    model = TwoSlotHost(lr=0.0)
    make_trainer(tmp_path, [callback]).fit(model, token_loader())
    assert not callback.resumed and torch.all(model.encoder_embedding.weight[1:] == 1)


def test_a_restore_that_lightning_did_not_announce_fails_before_training(tmp_path):
    """A Lightning that restored without calling on_load_checkpoint after setup (trainer.ckpt_path says a checkpoint
    was loaded) may have let the build overwrite it: the callback stops before the first step."""
    model, callback = TwoSlotHost(), EmbeddingInitCallback(source="ones", verbose=False)
    trainer = make_trainer(tmp_path, [callback])
    callback.setup(trainer, model, "fit")
    trainer.ckpt_path = "/restored/before/setup.ckpt"
    with pytest.raises(RuntimeError, match=r"restored /restored/before/setup.ckpt, but it called on_load_checkpoint"):
        callback.on_train_start(trainer, model)


def test_an_announced_restore_of_no_checkpoint_fails_before_training(tmp_path):
    model, callback = TwoSlotHost(), EmbeddingInitCallback(source="ones", verbose=False)
    trainer = make_trainer(tmp_path, [callback])
    callback.setup(trainer, model, "fit")
    callback.on_load_checkpoint(trainer, model, {})
    with pytest.raises(RuntimeError, match="restored no checkpoint, but it called on_load_checkpoint after setup"):
        callback.on_train_start(trainer, model)


def test_a_resume_discards_the_build_and_takes_the_checkpoints_report_and_seed(tmp_path):
    path = checkpoint_after_fit(tmp_path)
    saved = torch.load(path, weights_only=False)
    callback = EmbeddingInitCallback(source="ones", verbose=False, seed=3)
    model = TwoSlotHost(lr=0.0)
    make_trainer(tmp_path, [callback], max_steps=2).fit(model, token_loader(), ckpt_path=path)
    assert callback.resumed and callback.seed_used == 0  # the checkpoint's seed, not this callback's
    assert torch.equal(model.encoder_embedding.weight, saved["state_dict"]["encoder_embedding.weight"])
    assert callback.reports["encoder"]["source"] == "xavier"


def test_a_fresh_fit_after_validate_with_a_checkpoint_initializes(tmp_path):
    path = checkpoint_after_fit(tmp_path)
    source = CountingSource("ones")
    trainer = make_trainer(tmp_path, [EmbeddingInitCallback(source=source, verbose=False)], max_steps=1)
    trainer.validate(TwoSlotHost(), token_loader(), ckpt_path=path, verbose=False)
    assert trainer.ckpt_path is not None  # until the next fit's restore step sets it to that fit's (None)
    fresh = TwoSlotHost(lr=0.0)
    trainer.fit(fresh, token_loader())
    assert source.builds == 2 and torch.all(fresh.encoder_embedding.weight[1:] == 1)


def test_strategies_that_restore_after_setup_resume_too(tmp_path):
    """FSDP, DeepSpeed and ModelParallelStrategy restore after on_fit_start; the restore replaces the build."""
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
    assert callback.reports["encoder"]["source"] == "xavier"
