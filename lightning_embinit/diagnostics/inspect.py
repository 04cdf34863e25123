"""``embinit inspect``'s report: a start checked before paying for a run (docs/concepts.md#absorption, #tied-head).

Per slot: the init report row, the absorption measures
(:func:`~lightning_embinit.diagnostics.absorption.slot_absorption`) and, for a tied head, [S]'s predicted initial
loss ln(e^{dσ} + n − 1) (:func:`~lightning_embinit.diagnostics.initial_loss.tied_initial_loss`) next to ln n and the
table's own random-token loss; the table's isotropy and, for a tied table whose rows share directions, the predicted
random-token loss after each transform that removes them (:mod:`~lightning_embinit.diagnostics.shared_directions`);
then a verdict with the countermeasures for what is wrong. The JSON schema (``"schema": "embinit.inspect/1"``) is
stable: ``slots`` (each with the fields of :data:`SLOT_FIELDS` and ``init_report``, the callback's row verbatim) and
``verdict``. For a model that adds nothing to its token vectors (rotary, ALiBi, relative-bias) ``positions`` is
:data:`NO_POSITIONS` with the reason, and the absorption fields are null.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from lightning_embinit.diagnostics.absorption import (
    POSITIONAL_THRESHOLD,
    SEMANTIC_THRESHOLD,
    Absorption,
    drowning,
    slot_absorption,
)
from lightning_embinit.diagnostics.initial_loss import tied_initial_loss
from lightning_embinit.diagnostics.shared_directions import (
    describe_predictions,
    predict_transforms,
    shares_directions,
    slot_loss_estimate,
)
from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.init.report import format_report, text_table
from lightning_embinit.init.schemes import get_scheme

SCHEMA = "embinit.inspect/1"
NO_POSITIONS = "no additive positional encoding"
"""What ``positions`` says of a slot whose model adds nothing to its token vectors (absorption does not apply)."""
SPREAD_LIMIT = 10.0
"""A slot without positional encodings is flagged when its std exceeds this multiple of Xavier's."""
MIN_COVERAGE = 0.5
"""A pre-trained source is flagged when it covers less than this fraction of the slot's tokens."""
TIED_HEAD_COUNTERMEASURES = (
    "initialize the table with log_n_over_d (σ = ln n / d, [S] (a)), untie the output head, or keep the tie "
    "with head='tied_orthogonal' or head='tied_half_swap'"
)
SPREAD_COUNTERMEASURES = "standardize the table to Xavier's range (standardize='xavier', [K] §3.4)"
COVERAGE_COUNTERMEASURES = (
    "check that the source matches the tokenization (casing, word vs sub-word); a sub-word model's own tokenizer "
    "gives full coverage"
)
#: The fields of each slot in ``embinit inspect --format json`` (schema ``embinit.inspect/1``).
SLOT_FIELDS = tuple(
    "name num_embeddings embedding_dim source transforms trainable tied tied_modules family positions mean std "
    "min max input_scale scaled_mean scaled_std scaled_min scaled_max positional_std positional_min "
    "positional_max positional_range ratio semantic_retention positional_retention neighbour_survival "
    "xavier_std std_over_xavier coverage top_share top_k top_k_share iid_top_share mean_cosine shared_directions "
    "predicted_initial_loss predicted_initial_loss_model probed_initial_loss random_token_estimate "
    "transform_predictions ln_vocab verdict problems".split()
)
#: The columns of the two diagnostics tables of ``embinit inspect`` (the init report above them has the statistics,
#: the ratio and the isotropy): title, slot field, number format.
ABSORPTION_COLUMNS = (
    ("semantic ret.", "semantic_retention", ".3f"),
    ("positional ret.", "positional_retention", ".3f"),
    ("NN survival", "neighbour_survival", ".3f"),
)
LOSS_COLUMNS = (
    ("std/Xavier", "std_over_xavier", ".3g"),
    ("init loss ([S])", "predicted_initial_loss", ".3f"),
    ("model estimate", "predicted_initial_loss_model", ".3f"),
    ("random-token loss", "probed_initial_loss", ".3f"),
    ("table estimate", "random_token_estimate", ".3f"),
    ("ln n", "ln_vocab", ".3f"),
)
Problem = dict[str, str]
"""A problem found in a slot: ``{"problem": what is wrong, "countermeasures": what to do}``."""


def diagnose_slot(
    slot: EmbeddingSlot,
    report: Mapping[str, Any],
    *,
    sample_rows: int = 1024,
    neighbours: int = 5,
    max_position: int | None = None,
    positional_threshold: float = POSITIONAL_THRESHOLD,
    semantic_threshold: float = SEMANTIC_THRESHOLD,
    loss_margin: float = 1.0,
    predicted_model: float | None = None,
    probed: float | None = None,
    pretrained_rows: torch.Tensor | None = None,
) -> dict[str, Any]:
    """One slot of the inspection: the report's numbers, absorption, the [S] prediction and the problems found.

    ``predicted_model``: the model's own [S] estimate; ``probed``: the model's loss on random tokens (its
    forward pass, no i.i.d. assumption), which catches a tied table whose correlated rows the formula misses;
    ``pretrained_rows``: the rows a pre-trained source filled (the transforms' statistics come from them)."""
    measured = slot_absorption(slot, sample_rows=sample_rows, neighbours=neighbours, max_position=max_position)
    result = _slot_numbers(slot, report, measured, predicted_model)
    result["probed_initial_loss"] = probed
    result.update(_shared_directions(slot, result, pretrained_rows, max_position))
    found = (
        _with_transforms(_tied_head_problem(result, loss_margin), result),
        _drowning_problem(measured, report, positional_threshold, semantic_threshold),
        _spread_problem(measured, report, result["xavier_std"]),
        _coverage_problem(report.get("coverage")),
    )
    problems = [problem for problem in found if problem is not None]
    result["verdict"] = "bad" if problems else "ok"
    result["problems"] = problems
    result["init_report"] = dict(report)
    return result


def _slot_numbers(
    slot: EmbeddingSlot, report: Mapping[str, Any], measured: Absorption | None, predicted_model: float | None
) -> dict[str, Any]:
    """The slot's shape, the report's statistics, the absorption measures and the [S] predictions."""
    n, d = slot.num_embeddings, slot.embedding_dim
    xavier_std = get_scheme("xavier").std(n, d)
    return {
        "name": slot.name,
        "num_embeddings": n,
        "embedding_dim": d,
        "source": report.get("source"),
        "transforms": list(report.get("transforms") or []),
        "trainable": report.get("trainable"),
        "tied": slot.is_tied,
        "tied_modules": list(slot.tied_modules),
        "family": slot.family,
        "positions": _positions(slot, measured),
        **{key: report[key] for key in ("mean", "std", "min", "max", "input_scale")},
        **{key: report[key] for key in ("scaled_mean", "scaled_std", "scaled_min", "scaled_max")},
        **{f"positional_{key}": report.get(f"pe_{key}") for key in ("std", "min", "max")},
        "positional_range": None if report.get("pe_std") is None else report["pe_max"] - report["pe_min"],
        "ratio": report.get("ratio"),
        **{key: getattr(measured, key, None) for key in ("semantic_retention", "positional_retention")},
        "neighbour_survival": getattr(measured, "neighbour_survival", None),
        "xavier_std": xavier_std,
        "std_over_xavier": report["std"] / xavier_std,
        "coverage": report.get("coverage"),
        **{key: report.get(key) for key in ("top_share", "top_k", "top_k_share", "iid_top_share", "mean_cosine")},
        "shared_directions": shares_directions(report),
        "predicted_initial_loss": tied_initial_loss(n, d, report["std"]) if slot.is_tied else None,
        "predicted_initial_loss_model": predicted_model,
        "ln_vocab": math.log(n),
    }


def _shared_directions(
    slot: EmbeddingSlot, numbers: Mapping[str, Any], pretrained_rows: torch.Tensor | None, max_position: int | None
) -> dict[str, Any]:
    """For a tied table: its own random-token loss (:func:`slot_loss_estimate`) and, when its rows share directions,
    the predicted loss after each transform that removes them (:func:`predict_transforms`)."""
    if not slot.is_tied:
        return {"random_token_estimate": None, "transform_predictions": None}
    estimate = slot_loss_estimate(slot, max_position=max_position)
    predictions = None
    if numbers["shared_directions"]:
        predictions = predict_transforms(slot, pretrained_rows=pretrained_rows, max_position=max_position)
    return {"random_token_estimate": estimate, "transform_predictions": predictions}


def _positions(slot: EmbeddingSlot, measured: Absorption | None) -> str:
    """What the slot's model adds to the scaled token vectors, in words: the family's ("learned table
    transformer.wpe"), or :data:`NO_POSITIONS` with the reason ("rotary embeddings in attention") when nothing."""
    if measured is not None:
        return slot.positions or "additive positional encoding"
    reason = (slot.positions or "").removeprefix("none: ")
    return f"{NO_POSITIONS} ({reason})" if reason else NO_POSITIONS


def _tied_head_problem(numbers: Mapping[str, Any], loss_margin: float) -> Problem | None:
    """A tied head whose start is far from uniform ([S]): its predicted initial loss exceeds ln n by more than
    ``loss_margin``, or its loss on random tokens does although the i.i.d. prediction does not (rows that share
    directions: many logits are large, not only the token's own)."""
    predicted, probed, ln_vocab = numbers["predicted_initial_loss"], numbers["probed_initial_loss"], numbers["ln_vocab"]
    if predicted is None:  # untied
        return None
    if predicted > ln_vocab + loss_margin:
        n, d, xavier_std = numbers["num_embeddings"], numbers["embedding_dim"], numbers["xavier_std"]
        advice, correlated = TIED_HEAD_COUNTERMEASURES, probed is not None and probed > predicted + loss_margin
        if tied_initial_loss(n, d, xavier_std) <= ln_vocab + loss_margin and not correlated:
            advice += (
                f", or standardize='xavier' (σ = {xavier_std:.3g}, predicted {tied_initial_loss(n, d, xavier_std):.2f})"
            )
        also = (
            f"; the model's loss on random tokens is higher still, {probed:.2f}: the rows share directions, which "
            "rescaling does not change"
            if correlated
            else ""
        )
        return {
            "problem": f"tied head: predicted initial loss ln(e^(dσ) + n − 1) = {predicted:.2f} is above ln n = "
            f"{ln_vocab:.2f} by more than {loss_margin:g} (dσ = {d * numbers['std']:.2f}, [S]){also}",
            "countermeasures": advice,
        }
    if probed is None or not probed > ln_vocab + loss_margin:
        return None
    return {
        "problem": f"tied head: the model's loss on random tokens is {probed:.2f}, above ln n = {ln_vocab:.2f} by more "
        f"than {loss_margin:g} although [S]'s prediction for i.i.d. rows of this std is {predicted:.2f}; the rows are "
        "not i.i.d. (they share directions), so the start is far from uniform",
        "countermeasures": "untie the output head, or keep the tie with head='tied_orthogonal' or "
        "head='tied_half_swap'; watch the first steps with InitialLossMonitor",
    }


def _with_transforms(problem: Problem | None, numbers: Mapping[str, Any]) -> Problem | None:
    """A tied head's problem, its countermeasures led by the transforms that remove the shared directions and their
    predicted random-token loss, when the rows share directions."""
    if problem is None or not numbers["transform_predictions"]:
        return problem
    removal = describe_predictions(numbers["transform_predictions"], numbers["embedding_dim"])
    return {**problem, "countermeasures": f"{removal}; or {problem['countermeasures']}"}


def _drowning_problem(
    measured: Absorption | None, report: Mapping[str, Any], positional_threshold: float, semantic_threshold: float
) -> Problem | None:
    """Positional encodings drowning the token rows, or the reverse
    (:func:`~lightning_embinit.diagnostics.absorption.drowning`)."""
    if measured is None:
        return None
    drowned = drowning(measured, positional_threshold=positional_threshold, semantic_threshold=semantic_threshold)
    if drowned is None:
        return None
    return {"problem": f"{drowned[0]}; σ(s·X)/σ(P) = {report['ratio']:.3g}", "countermeasures": drowned[1]}


def _spread_problem(measured: Absorption | None, report: Mapping[str, Any], xavier_std: float) -> Problem | None:
    """A slot without positional encodings whose std is more than :data:`SPREAD_LIMIT` × Xavier's."""
    if measured is not None or not report["std"] > SPREAD_LIMIT * xavier_std:
        return None
    return {
        "problem": f"std {report['std']:.3g} is {report['std'] / xavier_std:.0f}× Xavier's {xavier_std:.3g} "
        "(sources spread far above Xavier train worse unless standardized, [K])",
        "countermeasures": SPREAD_COUNTERMEASURES,
    }


def _coverage_problem(coverage: Mapping[str, Any] | None) -> Problem | None:
    """A pre-trained source that covers less than :data:`MIN_COVERAGE` of the slot's tokens."""
    if not coverage or not coverage["fraction"] < MIN_COVERAGE:
        return None
    return {
        "problem": f"the source covers only {coverage['found']}/{coverage['total']} tokens "
        f"({100 * coverage['fraction']:.1f}%); most frequent missing: {', '.join(coverage['missing'][:10])}",
        "countermeasures": COVERAGE_COUNTERMEASURES,
    }


def inspection(
    slots: Mapping[str, EmbeddingSlot],
    reports: Mapping[str, Mapping[str, Any]],
    *,
    predicted_model: Mapping[str, float | None] | None = None,
    probed: Mapping[str, float | None] | None = None,
    pretrained_rows: Mapping[str, torch.Tensor] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """``{"schema", "slots": [...], "verdict"}`` for every slot that has a report (see :func:`diagnose_slot`)."""
    missing = [name for name in reports if name not in slots]
    if missing:
        raise ValueError(f"reports for unknown slots {missing}; slots: {', '.join(slots)}")
    rows = [
        diagnose_slot(
            slots[name],
            report,
            predicted_model=(predicted_model or {}).get(name),
            probed=(probed or {}).get(name),
            pretrained_rows=(pretrained_rows or {}).get(name),
            **options,
        )
        for name, report in reports.items()
    ]
    return {"schema": SCHEMA, "slots": rows, "verdict": "bad" if any(r["verdict"] == "bad" for r in rows) else "ok"}


def _number(value: Any, digits: str = ".4g") -> str:
    return "-" if value is None else format(value, digits)


def _positions_line(row: Mapping[str, Any]) -> str | None:
    """For a slot of a known family, or one without positions: its input scale and what its model adds."""
    absent = row["positions"].startswith(NO_POSITIONS)
    if not (row["family"] or absent):
        return None
    family = f" ({row['family']})" if row["family"] else ""
    added = f"{row['positions']}: absorption does not apply" if absent else f"positions: {row['positions']}"
    return f"slot {row['name']!r}{family}: input scale {row['input_scale']:.4g}; {added}"


def format_inspection(result: Mapping[str, Any]) -> str:
    """The inspection as text: the init report, the absorption and initial-loss tables, what the model adds to the
    token vectors (for a slot of a known family, or one without positions), and the verdict lines."""
    init = format_report({row["name"]: row["init_report"] for row in result["slots"]})
    tables = []
    for title, columns, verdict in (
        ("Diagnostics: absorption ([K])", ABSORPTION_COLUMNS, False),
        ("Diagnostics: initial loss of a tied head ([S]; random tokens)", LOSS_COLUMNS, True),
    ):
        header = ["slot", *(name for name, _, _ in columns), *(["verdict"] if verdict else [])]
        rows = [
            [row["name"], *(_number(row.get(key), digits) for _, key, digits in columns)]
            + ([row["verdict"]] if verdict else [])
            for row in result["slots"]
        ]
        tables += ["", title, *text_table(header, rows)]
    positions = [line for line in map(_positions_line, result["slots"]) if line is not None]
    verdict = [
        "Verdict: the start looks sound." if result["verdict"] == "ok" else "Verdict: fix the start before training."
    ]
    for row in result["slots"]:
        for problem in row["problems"]:
            verdict.append(
                f"  slot {row['name']!r}: {problem['problem']}.\n    Countermeasures: {problem['countermeasures']}."
            )
    return "\n".join([init, *tables, *positions, "", *verdict])
