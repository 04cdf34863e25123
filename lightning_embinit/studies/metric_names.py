"""The names a trial's record can hold, known from its config before any trial runs: what the package's Lightning
systems log (:data:`MODEL_METRICS`), what its monitors publish, the protocol's ``best_`` values and the costs. A claim
on any other name is refused when the study is read (:func:`check_claim_metrics`), with the names it could use.

A model or a callback from outside the package may log any name: a config with one is not checked.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from lightning_embinit.studies.keys import StudyError, class_path
from lightning_embinit.studies.statistics import WALL_TIME

MODEL_METRIC = re.compile(r"^(train|val|test)_|^(epoch|step)$|^lr[-_]")
"""Names the Lightning systems log themselves (losses, accuracies, BLEU); everything else is a monitor's."""
TOKEN_LOSS = {"train": ("loss", "loss_epoch"), "eval": ("loss", "ppl")}
"""What ``LightningSystem._log_token_loss`` logs: ``train_loss`` per step, ``train_loss_epoch``, ``val_``/``test_``
``loss`` and ``ppl``."""
MODEL_METRICS: dict[str, dict[str, tuple[str, ...]]] = {
    "TiedEmbeddingLM": TOKEN_LOSS,
    "HuggingFaceLM": TOKEN_LOSS,
    "TransformerSeq2Seq": {"train": TOKEN_LOSS["train"], "eval": (*TOKEN_LOSS["eval"], "bleu")},
    "ReinforcedTransformerSeq2Seq": {"train": TOKEN_LOSS["train"], "eval": (*TOKEN_LOSS["eval"], "bleu")},
    "TransformerClassifier": {"train": ("loss", "acc"), "eval": ("loss", "acc", "f1")},
}
"""The package's Lightning systems → the metrics they log: ``train_<name>`` for ``train``, ``val_<name>`` and
``test_<name>`` for ``eval``. A trial's record holds them in ``final`` (the end of fit) and ``metrics`` (the best
checkpoint's test or validation)."""
NAMED_LOADERS = {"TransformerClassifier": r"^(val|test)_\w+_({names})$"}
"""Systems that log each of several validation or test sets as ``val_<set>_<name>`` (the datamodule names the sets)."""
COST_NAMES = ("parameters", "trainable_parameters", "fit_s", "seconds_per_step", "seconds_per_epoch", "whole_epochs")
"""The ``cost`` section of a trial record (:func:`~.outcome.cost_values`); ``wall_time_s`` is next to it."""
MONITOR_NAMES = {
    "InitialLossMonitor": (
        "init_loss",
        "ln_vocab",
        "init_loss_ratio",
        "init_loss_predicted",
        "init_loss_predicted_model",
        "init_loss_random_tokens",
    )
}
"""The package's monitors that publish fixed names."""
MONITOR_PREFIXES = {
    "EmbeddingVarianceMonitor": "embvar",
    "LearningSpeedMonitor": "learning_speed",
    "LexicalProbe": "lexical",
}
"""The package's monitors that publish ``<prefix>/...`` names: the default of their ``prefix`` argument."""
INIT_REPORT_PREFIX = {"EmbeddingInitCallback": "embinit"}
"""``EmbeddingInitCallback`` logs its report's scalars as ``embinit/<slot>/<key>``."""
SILENT_CALLBACKS = (
    "ModelCheckpoint",
    "EarlyStopping",
    "LearningRateMonitor",
    "TQDMProgressBar",
    "RichProgressBar",
    "ModelSummary",
    "RichModelSummary",
)
"""Lightning's callbacks that log no name a record holds (LearningRateMonitor's ``lr-*`` go to the logger only)."""


def model_metrics(config: Mapping[str, Any]) -> tuple[str, list[str], re.Pattern[str] | None] | None:
    """(the system's class name, the metrics it logs, the pattern of its per-set names or None) of a trial's config;
    None for a model from outside the package (which may log any name)."""
    path = class_path(config.get("model")) or ""
    name = path.rsplit(".", 1)[-1]
    if not path.startswith("lightning_embinit.") or name not in MODEL_METRICS:
        return None
    logged = MODEL_METRICS[name]
    names = [f"train_{metric}" for metric in logged["train"]]
    names += [f"{stage}_{metric}" for stage in ("val", "test") for metric in logged["eval"]]
    sets = NAMED_LOADERS.get(name)
    return name, names, re.compile(sets.format(names="|".join(logged["eval"]))) if sets else None


def published_monitors(config: Mapping[str, Any]) -> tuple[set[str], set[str]] | None:
    """(exact names, ``prefix/`` starts) of the monitors a trial's config can record; None when that is not knowable
    (a model or a callback from outside the package, which may log any name)."""
    if not (class_path(config.get("model")) or "").startswith("lightning_embinit."):
        return None
    names, prefixes = set(), set()
    for entry in (config.get("trainer") or {}).get("callbacks") or []:
        name = str(class_path(entry)).rsplit(".", 1)[-1]
        arguments = (entry.get("init_args") or {}) if isinstance(entry, Mapping) else {}
        if name in MONITOR_NAMES:
            names.update(MONITOR_NAMES[name])
        elif name in MONITOR_PREFIXES:
            prefixes.add(f"{arguments.get('prefix') or MONITOR_PREFIXES[name]}/")
        elif name in INIT_REPORT_PREFIX:
            prefixes.add(f"{INIT_REPORT_PREFIX[name]}/")
        elif name not in SILENT_CALLBACKS:
            return None
    return names, prefixes


def _metric_problem(metric: str, config: Mapping[str, Any]) -> str:
    """Why no trial of ``config`` records ``metric``, with the names it could use ("" when one may)."""
    model, published = model_metrics(config), published_monitors(config)
    if metric.startswith("best_") or metric in (*COST_NAMES, WALL_TIME) or model is None or published is None:
        return ""  # best_: the protocol's check (claims.protocol_problem); costs: every record
    system, names, per_set = model
    monitors, prefixes = published
    if metric in names or metric in monitors or metric.startswith(tuple(prefixes)):
        return ""
    if per_set is not None and per_set.fullmatch(metric):
        return ""
    close = difflib.get_close_matches(metric, [*names, *monitors], n=1)
    offered = ", ".join([*sorted(monitors), *(f"{p}..." for p in sorted(prefixes))]) or "none"
    sets = " (and val_<set>_..., test_<set>_... per named set)" if per_set is not None else ""
    return (
        (f" (did you mean {close[0]!r}?)" if close else "")
        + f": its model {system} logs {', '.join(names)}{sets}; the protocol keeps best_<its monitor>, best_epoch "
        f"and best_step; every trial records the costs {', '.join((*COST_NAMES, WALL_TIME))}; its callbacks publish "
        f"{offered}"
    )


def check_claim_metrics(claims: Iterable[Any], configs: Mapping[str, Mapping[str, Any]], where: str) -> None:
    """StudyError for a claim (:class:`~.claims.Claim`) whose metric no trial of its setting or versus
    (``configs``: setting → a trial's config) records: not logged by the model, published by a callback, kept by the
    protocol, or a cost. A config with a model or callback from outside the package passes."""
    for claim in claims:
        for setting in (claim.setting, claim.versus):
            if setting in configs and (problem := _metric_problem(claim.metric, configs[setting])):
                raise StudyError(
                    f"{where}, claim {claim.id!r}: no trial of setting {setting!r} records metric "
                    f"{claim.metric!r}{problem}"
                )
