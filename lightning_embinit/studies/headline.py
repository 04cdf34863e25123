"""The package's headline as a :class:`~.spec.Study` built in Python, so the installed package runs it without the repo.

[K]'s finding on [S]'s model (docs/concepts.md#transforms, #tied-head): a pre-trained start whose spread is far from
Xavier's hurts; standardized to Xavier's std it does not. It is ``examples/studies/headline.yaml`` as an object
(the Headline section of docs/results.md describes its trials).
"""

from __future__ import annotations

import copy
from typing import Any

from lightning_embinit.studies.spec import Study

SOURCE_KEY = "trainer.callbacks[EmbeddingInitCallback].init_args.source"

#: The metrics the quick start prints: the outcome, the init report and the start-of-training diagnostics.
HEADLINE_METRICS = (
    "best_val_loss",
    "init_loss",
    "init_loss_predicted",
    "embinit/tokens/std",
    "embinit/tokens/ratio",
    "embvar/tokens/semantic_retention_at_start",
    "embvar/tokens/positional_retention_at_start",
)

_TIED_LM_CONFIG: dict[str, Any] = {  # examples/configs/tied_lm.yaml
    "seed_everything": 0,
    "model": {
        "class_path": "lightning_embinit.models.TiedEmbeddingLM",
        "init_args": {
            "architecture": {
                "d_model": 256,
                "num_heads": 4,
                "num_layers": 2,
                "ffn_dim": 512,
                "max_len": 64,
                "positional": "learned",
                "norm": "layernorm",
                "head": "tied",
                "zero_init_residual": True,
                "init_scheme": "xavier",
            },
            "optimizer": {"lr": 0.001, "lr_schedule": "constant"},
        },
    },
    "data": {
        "class_path": "lightning_embinit.data.LanguageModelDataModule",
        "init_args": {"seq_len": 64, "batch_size": 32, "min_freq": 2},
    },
    "trainer": {
        "max_steps": 200,
        "val_check_interval": 50,
        "check_val_every_n_epoch": None,
        "log_every_n_steps": 10,
        "callbacks": [
            {
                "class_path": "lightning_embinit.EmbeddingInitCallback",
                "init_args": {"source": "normal:1/sqrt(d)", "seed": 0},
            },
            {"class_path": "lightning_embinit.InitialLossMonitor", "init_args": {"track_steps": 100, "margin": 1.0}},
        ],
    },
}


def _claim(claim_id: str, says: str, setting: str, versus: str, direction: str, **margin: float) -> dict[str, Any]:
    return {
        "id": claim_id,
        "source": "[K] Kim et al., On Initializing Transformers with Pre-trained Embeddings",
        "says": says,
        "setting": setting,
        "versus": versus,
        "metric": "best_val_loss",
        "direction": direction,
        **margin,
    }


HEADLINE_CLAIMS = [  # as in examples/studies/headline.yaml
    _claim(
        "raw_word2vec_worse",
        "pre-trained vectors whose spread is far from Xavier's do worse than Xavier",
        "word2vec_raw",
        "xavier",
        "higher",
    ),
    _claim(
        "standardizing_helps",
        "standardizing them to Xavier's std fixes that",
        "word2vec_xavier",
        "word2vec_raw",
        "lower",
    ),
    _claim(
        "standardized_as_xavier",
        "standardized to Xavier's std, they do as well as Xavier (the spread explains the gap)",
        "word2vec_xavier",
        "xavier",
        "equal",
        margin=0.05,
    ),
]


def headline_study() -> Study:
    """The headline study: settings ``xavier``, ``word2vec_raw``, ``word2vec_xavier``; variants ``smoke``
    (3 × 2 seeds, about a minute on 2 cores), ``medium`` (3 × 7 seeds, 350 steps) and ``full``
    (5 seeds, 2,000 steps)."""
    return Study.from_dict(
        {
            "name": "headline",
            "description": "Headline: word2vec trained on the training text, raw vs standardized to Xavier's std vs "
            "Xavier, on the tied-embedding LM (offline)",
            "base": copy.deepcopy(_TIED_LM_CONFIG),
            "overrides": {
                "trainer.callbacks[+]": {
                    "class_path": "lightning_embinit.EmbeddingVarianceMonitor",
                    "init_args": {"every_n_steps": None, "figures": False, "warn": False},
                }
            },
            "settings": {
                "xavier": {SOURCE_KEY: "xavier"},
                "word2vec_raw": {SOURCE_KEY: "word2vec-trainset"},
                "word2vec_xavier": {
                    SOURCE_KEY: "word2vec-trainset",
                    "trainer.callbacks[EmbeddingInitCallback].init_args.standardize": "xavier",
                },
            },
            "reference": "xavier",
            "seeds": [0, 1, 2, 3, 4],
            "seed_keys": ["trainer.callbacks[EmbeddingInitCallback].init_args.seed"],
            "protocol": {"monitor": "val_loss", "mode": "min", "test": "auto"},
            "claims": HEADLINE_CLAIMS,
            "variants": {
                "smoke": {
                    "seeds": [0, 1],
                    "overrides": {
                        "data.init_args.batch_size": 8,
                        "trainer.max_steps": 80,
                        "trainer.val_check_interval": 20,
                        "trainer.num_sanity_val_steps": 0,
                        "trainer.log_every_n_steps": 5,
                        "trainer.enable_model_summary": False,
                        "trainer.logger": False,
                        "trainer.callbacks[InitialLossMonitor].init_args.track_steps": 80,
                    },
                },
                "medium": {
                    "seeds": [0, 1, 2, 3, 4, 5, 6],
                    "description": "d 256, 2 layers, 350 steps at batch 32 × 64 tokens, lr 1e-3",
                    "overrides": {
                        "trainer.max_steps": 350,
                        "trainer.val_check_interval": 50,
                        "trainer.log_every_n_steps": 10,
                        "trainer.callbacks[InitialLossMonitor].init_args.track_steps": 350,
                    },
                },
                "full": {
                    "seeds": [0, 1, 2, 3, 4],
                    "overrides": {"trainer.max_steps": 2000, "trainer.val_check_interval": 200},
                },
            },
        }
    )
