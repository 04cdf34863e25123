"""A token table's input scale and added positions, settled: what the family reads from names and flags (a
:class:`Claim`), checked against what the probe saw the model do (:mod:`~lightning_embinit.init.families.probe`).

Where the probe ran, it decides: s is the probe's (the claim's exact value when the two agree to 0.1 %), and the
added rows are, in this order, the claimed rows when they are what the model added, nothing when P = 0, the rows of
the parameter or buffer that holds P (a sinusoidal buffer, a learned table the names missed), one constant row, or
else rows measured by running the probe over every position. Where it could not run (meta device, sharded tables) or
found no fit, the claim stands. ``*_found_by`` says which, in words, for the report.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch
from torch import nn

from lightning_embinit.init.families.probe import LENGTH, Fit, Runner, find_rows, observe, probe_ids

Rows = Callable[[], "torch.Tensor | None"]


@dataclass(frozen=True)
class Claim:
    """What names and flags say of a table: the scale and where it was read, the added rows in words and as rows
    (None: none claimed), and in words what the model does instead when it adds nothing."""

    scale: float
    scale_from: str
    positions: str
    rows: Rows | None
    nothing_added: str = "none found"


@dataclass(frozen=True)
class Finding:
    """What the probe found for one table, as plain data (cached per model; no reference to the model).

    ``added``: ``claimed`` (the claim's rows), ``nothing``, ``rows`` (``rows_at`` = module path, attribute, offset),
    ``constant`` (one row), ``measured`` (rows only a probe over every position gives), or ``unknown`` (no fit:
    ``reason`` says why). ``agreement``: how close, relatively, a claimed scale must be to count as the same (the
    rounding of the table's dtype: a bf16 normalizer of √d is √d to 1e-2, not to 1e-5)."""

    scale: float | None
    where: str | None
    added: str
    reason: str | None = None
    rows_at: tuple[str, str, int] | None = None
    rows_words: str | None = None
    constant: torch.Tensor | None = None
    agreement: float = 1e-5


@dataclass(frozen=True)
class Settled:
    """A table's input scale and added positions, and how each was found."""

    input_scale: float
    input_scale_found_by: str
    positions: str
    positional_rows: Rows | None
    positions_found_by: str


def closeness(dtype: torch.dtype) -> float:
    """How far, relative to the largest fitted input, two added rows may differ and still be the same rows."""
    return 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-5


def find(model: nn.Module, fit: Fit | str, claim: Claim, dtype: torch.dtype, skip: set[int]) -> Finding:
    """Sort the probe's fit for a table (module docstring); ``skip``: ids of the token tables' weights."""
    if isinstance(fit, str):
        return Finding(None, None, "unknown", reason=fit)
    added = fit.added
    limit = closeness(dtype) * max(fit.size, 1e-12)
    base = {"scale": fit.scale, "where": fit.where, "agreement": closeness(dtype)}
    claimed = claim.rows() if claim.rows is not None else None
    if claimed is not None and claimed.shape[0] >= added.shape[0] and claimed.shape[1] == added.shape[1]:
        if float((claimed[: added.shape[0]].to(added) - added).abs().max()) <= limit:
            return Finding(added="claimed", **base)
    if float(added.abs().max()) <= limit:
        return Finding(added="nothing", **base)
    located = find_rows(model, added, skip, limit)
    if located is not None:
        path, name, offset, words = located
        return Finding(added="rows", rows_at=(path, name, offset), rows_words=words, **base)
    if float((added - added[:1]).abs().max()) <= limit:
        return Finding(added="constant", constant=added[:1].clone(), **base)
    return Finding(added="measured", **base)


MEASURED_POSITIONS = 2048
"""The most positions a probe measures added rows over (rows no single tensor holds: one forward to the first layer
per measurement; litgpt's block_size may be 128k)."""


def settle(model: nn.Module, claim: Claim, finding: Finding, measure: Rows) -> Settled:
    """The table's scale and positions from the claim and the finding; ``measure()`` runs the probe over every
    position (for ``measured`` rows)."""
    if finding.scale is None:
        note = f"; probe: {finding.reason}"
        return Settled(claim.scale, claim.scale_from + note, claim.positions, claim.rows, "names and flags" + note)
    if math.isclose(finding.scale, claim.scale, rel_tol=finding.agreement):
        scale, scale_by = claim.scale, f"probe, agrees with {claim.scale_from}"
    else:
        scale, scale_by = (
            finding.scale,
            f"probe at the input of {finding.where} ({claim.scale_from} says {claim.scale:g})",
        )
    if finding.added == "claimed":
        return Settled(scale, scale_by, claim.positions, claim.rows, "probe, agrees with names and flags")
    if finding.added == "nothing":
        words = claim.nothing_added if claim.rows is None else "none found (the model adds no positions)"
        return Settled(scale, scale_by, words, None, "probe: nothing added")
    if finding.added == "rows" and finding.rows_at is not None:
        path, name, offset = finding.rows_at
        words = f"{finding.rows_words} from row {offset}" if offset else str(finding.rows_words)
        return Settled(scale, scale_by, words, live_rows(model, path, name, offset), "probe: the rows it adds")
    if finding.added == "constant" and finding.constant is not None:
        row = finding.constant
        return Settled(scale, scale_by, "one constant row at every position", lambda: row, "probe: the row it adds")
    words = "rows measured by running the model (no single table holds them)"
    return Settled(scale, scale_by, words, measure, "probe: measured over every position")


def live_rows(model: nn.Module, path: str, name: str, offset: int) -> Rows:
    """The rows of ``path``'s tensor ``name`` from ``offset`` on, looked up at each call (a re-created buffer too)."""
    held = weakref.ref(model)

    def rows() -> torch.Tensor | None:
        root = held()
        if root is None:
            return None
        return getattr(root.get_submodule(path), name).detach()[offset:]

    return rows


_CACHE: weakref.WeakKeyDictionary[nn.Module, tuple[Hashable, object]] = weakref.WeakKeyDictionary()


def cached(model: nn.Module, key: Hashable, compute: Callable[[], object]) -> object:
    """``compute()`` once per model and ``key`` (the tables' identities, shapes, dtypes and devices): the probe runs
    when a model is first seen, not at every slot lookup. A result holding a ``str`` (the probe could not tell, e.g.
    from a constant table) is not kept."""
    found = _CACHE.get(model)
    if found is not None and found[0] == key:
        return found[1]
    value = compute()
    if not _transient(value):
        _CACHE[model] = (key, value)
    return value


def _transient(value: object) -> bool:
    if isinstance(value, dict):
        return any(isinstance(v, Finding) and v.reason and "all equal" in v.reason for v in value.values())
    return False


def table_key(model: nn.Module, tables: list[nn.Module]) -> Hashable:
    """What the cached finding depends on: the model's config object and each table's identity, shape, dtype, device."""
    return (
        id(getattr(model, "config", None)),
        tuple((id(t), tuple(t.weight.shape), t.weight.dtype, str(t.weight.device)) for t in tables),
    )


def probed(model: nn.Module, table: nn.Embedding, claim: Claim, run: Runner, length: int) -> Settled:
    """A single-stream model's table settled (``run(ids, None)`` runs its forward; ``length``: its positions, at most
    :data:`MEASURED_POSITIONS` measured)."""
    length = min(length, MEASURED_POSITIONS)

    def fit(positions: int, root: nn.Module) -> Fit | str:
        ids = probe_ids(table.num_embeddings, positions, {table.padding_idx} - {None}, 0)
        observed = observe(root, run, {"input": ids}, {table.embedding_dim})
        return observed if isinstance(observed, str) else observed.fit("input", table)

    def compute() -> dict[str, Finding]:
        return {"input": find(model, fit(LENGTH, model), claim, table.weight.dtype, {id(table.weight)})}

    held = weakref.ref(model)

    def measure() -> torch.Tensor | None:
        root = held()
        found = fit(length, root) if root is not None else "the model no longer exists"
        return None if isinstance(found, str) else found.added

    finding = cached(model, table_key(model, [table]), compute)
    return settle(model, claim, finding["input"], measure)  # type: ignore[index]
