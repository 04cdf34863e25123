"""The private Lightning details this package relies on, in one place, each failing loudly when missing.

Lightning offers no public way to know, at ``setup``, whether the running ``fit`` will restore a
checkpoint (it restores after ``setup``, and ``trainer.ckpt_path`` still holds the path of an
earlier ``fit``/``validate`` call), nor a public hook to adjust the model configuration that
LightningCLI reads from ``--ckpt_path``. Where such a detail is missing in a Lightning release,
the package warns with :class:`LightningInternalsWarning` (an error under the test suite) and
takes the safe path; it never skips work silently.

The details, each covered by tests that ``make test-lightning-latest`` runs against the newest
Lightning on the package index:

1. the ``Trainer._run`` frame's ``ckpt_path`` (:func:`running_fit_checkpoint`), confirmed by each
   callback's own ``on_load_checkpoint`` (:func:`check_resume_restored`; ``callbacks/embedding_init.py``,
   ``callbacks/vocabulary_extension.py``);
2. ``LightningCLI._parse_ckpt_path``, overridden by ``EmbinitCLI`` (``lightning_cli.py``), whose call is
   checked in ``before_instantiate_classes``;
3. how Lightning re-creates a ``BatchSampler`` subclass around its ``DistributedSampler`` and calls
   ``set_epoch`` on ``batch_sampler.sampler`` (``data/batching.py``): documented behaviour of
   ``use_distributed_sampler``, but the re-creation itself is internal; the 2-process DDP tests of
   the data modules fail if it changes (no rank would get a disjoint share).
"""

from __future__ import annotations

import inspect
from typing import Any

from lightning.pytorch import Trainer

FIT_RUN_FRAME = "_run"
"""``Trainer._run(model, ckpt_path=...)``: the frame whose ``ckpt_path`` is the checkpoint this fit restores."""

#: What :func:`running_fit_checkpoint` returns when no ``Trainer._run`` frame of the trainer is on the stack.
NOT_FOUND = object()


class LightningInternalsWarning(UserWarning):
    """A private Lightning detail the package relies on is missing; it fell back to a safe path."""


def running_fit_checkpoint(trainer: Trainer) -> Any:
    """The ``ckpt_path`` the running ``trainer.fit`` restores (None for a fresh fit), or :data:`NOT_FOUND`
    when no ``Trainer._run`` frame of this trainer is on the stack (``setup`` called by hand, or a
    Lightning release that renamed the frame)."""
    frame = inspect.currentframe()
    try:
        while frame is not None:
            if frame.f_code.co_name == FIT_RUN_FRAME and frame.f_locals.get("self") is trainer:
                return frame.f_locals.get("ckpt_path")
            frame = frame.f_back
        return NOT_FOUND
    finally:
        del frame


def check_resume_restored(owner: str, skipped: str, awaiting: Any, restored: bool, consequence: str) -> None:
    """Fail before the first step when ``owner`` skipped work because :func:`running_fit_checkpoint` promised a
    resume from ``awaiting`` but Lightning called no ``on_load_checkpoint`` (``restored`` is False)."""
    if awaiting is not None and not restored:
        raise RuntimeError(
            f"{owner} skipped {skipped} because this fit was to resume from {awaiting}, but Lightning restored no "
            f"checkpoint: {consequence}. This Lightning release changed how fit resumes; please report it "
            "(lightning_embinit)."
        )
