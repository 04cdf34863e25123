"""Lightning's and torch's noise that the package's commands leave out, while they run (nothing changes on import).

Lightning logs a "💡 Tip" advertising litlogger (and litmodels when a checkpoint is saved) at every fit, and its
``_pytree.py`` trips torch's ``LeafSpec is deprecated`` FutureWarning; transformers warns "`loss_type=None` was set in
the config but it is unrecognized" for a model class whose name does not name its loss (``GPT2LMHeadModel``), and
then uses the causal-LM loss it should; none of these is about the user's run.
:func:`quiet_lightning` also leaves out Lightning's per-fit banners (GPU/TPU lines, the model summary): what the
examples of the docs use around a fit. Imports only the standard library, so that the commands' help stays fast.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

LIGHTNING_LOGGERS = ("lightning.pytorch", "lightning.fabric")
"""The loggers of Lightning's banners (device lines, model summary, tips)."""
RANK_ZERO_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")
"""The loggers of Lightning's ``rank_zero_info``."""
ADVERTISED = ("litlogger", "litmodels")


TRANSFORMERS_LOSS_LOGGER = "transformers.modeling_utils"
"""The logger of transformers' ``loss_type=None`` warning."""


class UnnamedLossFilter(logging.Filter):
    """Drops transformers' "`loss_type=None` was set in the config but it is unrecognized" record."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("`loss_type=None` was set in the config but it is unrecognized")


class LightningTipFilter(logging.Filter):
    """Drops Lightning's "💡 Tip" records that advertise ``ADVERTISED`` packages."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith("💡 Tip") and any(name in message for name in ADVERTISED))


@contextlib.contextmanager
def quiet_lightning_noise() -> Iterator[None]:
    """Within: Lightning's litlogger/litmodels tips, torch's ``LeafSpec`` deprecation warning and transformers'
    ``loss_type=None`` warning are not shown."""
    filters = [(logging.getLogger(name), LightningTipFilter()) for name in RANK_ZERO_LOGGERS]
    filters.append((logging.getLogger(TRANSFORMERS_LOSS_LOGGER), UnnamedLossFilter()))
    for logger, record_filter in filters:
        logger.addFilter(record_filter)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
            yield
    finally:
        for logger, record_filter in filters:
            logger.removeFilter(record_filter)


BANNERS = (
    "GPU available:",
    "TPU available:",
    "HPU available:",
    "IPU available:",
    "LOCAL_RANK:",
    "Seed set to",
    "`Trainer(",
    "`Trainer.fit` stopped:",
)
"""The starts of Lightning's per-run banners (the devices, the seed, the limits it was given, why fit stopped)."""


class LightningBannerFilter(logging.Filter):
    """Drops Lightning's per-run banner records (:data:`BANNERS`); everything else logged passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(BANNERS)


@contextlib.contextmanager
def quiet_lightning(*, info: bool = True) -> Iterator[None]:
    """Within: Lightning's per-run banners (GPU/TPU lines, the seed, :data:`BANNERS`) and tips, torch's ``LeafSpec``
    deprecation and Lightning's "does not have many workers" advice are not shown; warnings about the run and the
    package's own reports (the init report, the monitors' lines) stay. ``info=False``: Lightning's loggers at
    WARNING, so those reports are left out too (the quick start prints its own table). The model summary is a
    Trainer option: ``enable_model_summary=False``."""
    loggers = [logging.getLogger(name) for name in LIGHTNING_LOGGERS]
    levels = [logger.level for logger in loggers]
    banners = [(logging.getLogger(name), LightningBannerFilter()) for name in RANK_ZERO_LOGGERS]
    for logger in loggers:
        logger.setLevel(logger.level if info else logging.WARNING)
    for logger, record_filter in banners:
        logger.addFilter(record_filter)
    try:
        with quiet_lightning_noise(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*does not have many workers.*")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
        for logger, record_filter in banners:
            logger.removeFilter(record_filter)
