"""A tiny study for the sweep tests: TiedEmbeddingLM on the Lee corpus gensim ships (offline), a few steps."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import yaml
from lightning.pytorch.callbacks import Callback

TIED_LM = Path(__file__).resolve().parent.parent / "examples" / "configs" / "tied_lm.yaml"

TINY = {
    "model.init_args.architecture.d_model": 16,
    "model.init_args.architecture.num_heads": 2,
    "model.init_args.architecture.num_layers": 1,
    "model.init_args.architecture.ffn_dim": 32,
    "model.init_args.architecture.max_len": 16,
    "data.init_args.seq_len": 16,
    "data.init_args.batch_size": 16,
    "trainer.max_steps": 4,
    "trainer.val_check_interval": 2,
    "trainer.log_every_n_steps": 1,
    "trainer.limit_val_batches": 2,
    "trainer.callbacks[InitialLossMonitor].init_args.track_steps": 2,
    "trainer.enable_model_summary": False,
    "trainer.logger": False,
}


def tiny_study(
    name: str = "tiny", settings: dict[str, Any] | None = None, seeds: list[int] | None = None, **extra: Any
) -> dict[str, Any]:
    """The mapping of a tiny study over examples/configs/tied_lm.yaml."""
    return {
        "name": name,
        "base": str(TIED_LM),
        "overrides": dict(TINY),
        "settings": settings
        if settings is not None
        else {"normal": {}, "small": {"trainer.callbacks[EmbeddingInitCallback].init_args.source": "normal:0.02"}},
        "seeds": seeds if seeds is not None else [0, 1],
        "seed_keys": ["trainer.callbacks[EmbeddingInitCallback].init_args.seed"],
        **extra,
    }


def write_study(path: Path, study: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(study, sort_keys=False), encoding="utf-8")
    return path


class KillProcess(Callback):
    """Ends its own process with SIGKILL when training starts, as the kernel's out-of-memory killer would."""

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        os.kill(os.getpid(), signal.SIGKILL)
