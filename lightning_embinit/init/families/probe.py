"""Find out from a model itself what it multiplies a token table's rows by and what it adds to them (torch only).

:func:`observe` runs the model's own forward on two rows of probe ids (B = 2; eval mode, no gradient) with a forward
pre-hook on every module, and stops it at the first block (a child of an ``nn.ModuleList``) entered after the ids
reached their token table. Among the module inputs recorded in between, the **last** x with

    x[b, t] = s · E[ids[b, t]] + P[t]        (one scalar s; P the same for both rows, i.e. not a function of the ids)

is what the model feeds its layers (:meth:`Observation.fit`): s by least squares on the difference of the two rows,
s = ⟨Δx, ΔE⟩ / ⟨ΔE, ΔE⟩ (Δ: row 0 − row 1, which cancels P), accepted when ‖Δx − s·ΔE‖ ≤ tol·‖Δx‖; then
P = x[0] − s·E[ids[0]]. An encoder–decoder runs its decoder ids as a second stream, so a decoder with a table of its
own is probed too. The probe cannot run on a model with parameters on the meta device or sharded (``DTensor``), nor
on a table whose probed rows are all equal: :func:`observe` then returns the reason as a string.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

Runner = Callable[[torch.Tensor, "torch.Tensor | None"], object]
"""Runs a model's forward on (ids, decoder ids or None)."""

ROWS = 2
"""Probe rows: two id sequences of one length (their difference cancels what does not depend on the ids)."""
LENGTH = 8
"""Probe positions for the scale and the kind of positions (the rows of P are read for the whole length later)."""


class _Stop(Exception):
    """Raised from a hook to end the probed forward once every stream reached its first block."""


@dataclass(frozen=True)
class Fit:
    """What the model feeds its first layer for one table: s · E[ids] + ``added`` (``added``: (T, D) float32), read
    at the input of module ``where``; ``size``: the largest absolute value there (the yardstick for "the same rows")."""

    scale: float
    added: torch.Tensor
    where: str
    size: float


@dataclass
class _Stream:
    """One stream of probe ids; once a table looked them up: how they sat in its input (``transposed``: sequence
    first; ``offset``: where along the sequence, when the model put other ids around them) and that input's shape."""

    ids: torch.Tensor
    tables: list[nn.Module] = field(default_factory=list)
    start: int | None = None
    end: int | None = None
    transposed: bool = False
    offset: int = 0
    seen: tuple[int, ...] | None = None

    def holds(self, x: torch.Tensor) -> bool:
        """Whether a 3-D module input can hold this stream's positions: its batch, and at least its length (a model
        may pad, prepend ids, or go sequence first)."""
        batch, length = self.ids.shape
        return (x.shape[0] == batch and x.shape[1] >= length) or (x.shape[1] == batch and x.shape[0] >= length)

    def place(self, seen: torch.Tensor) -> tuple[bool, int] | None:
        """(transposed, offset) when ``seen`` holds the ids, batch first or sequence first, as a window along the
        sequence; else None."""
        ids = self.ids
        for transposed, held in ((False, seen), (True, seen.transpose(0, 1) if seen.dim() == 2 else None)):
            if held is None or held.dim() != 2 or held.shape[0] != ids.shape[0] or held.shape[1] < ids.shape[1]:
                continue
            held = held.to(ids.device, ids.dtype)
            for offset in range(held.shape[1] - ids.shape[1] + 1):
                if torch.equal(held[:, offset : offset + ids.shape[1]], ids):
                    return transposed, offset
        return None

    def aligned(self, recorded: torch.Tensor) -> torch.Tensor | None:
        """A recorded (B, L, D) or (L, B, D) input as (B, T, D) at the ids' positions, else None."""
        batch, length = self.ids.shape
        layouts = (recorded.transpose(0, 1), recorded) if self.transposed else (recorded, recorded.transpose(0, 1))
        for x in layouts:
            if x.shape[0] == batch and x.shape[1] >= self.offset + length:
                return x[:, self.offset : self.offset + length]
        return None


@dataclass
class Observation:
    """The recorded module inputs of one probed forward, and per stream (``input``, ``decoder``) its ids, the token
    tables they reached (in call order) and the window of records from the first table call to the first block."""

    streams: dict[str, _Stream]
    records: list[tuple[str, torch.Tensor]]
    error: str | None = None

    def tables(self, stream: str) -> list[nn.Module]:
        return list(dict.fromkeys(self.streams[stream].tables)) if stream in self.streams else []

    def fit(self, stream: str, table: nn.Embedding) -> Fit | str:
        """The last recorded input of the stream's window that is s · E[ids] + P (module docstring), or why none."""
        found = self.streams.get(stream)
        if found is None or found.start is None:
            return f"the {stream} ids reached no token table"
        ids = found.ids.to(table.weight.device)
        rows = table.weight.detach()[ids].to(torch.float64)
        change = rows[0] - rows[1]
        if not bool(change.abs().gt(0).any()):
            return "the probed rows of the table are all equal (a constant table): nothing to tell s from"
        window = self.records[found.start : found.end]
        for where, recorded in reversed(window):
            x = found.aligned(recorded)
            if x is None or x.shape[-1] != rows.shape[-1]:
                continue
            fitted = _fit(x.to(rows.device, torch.float64), rows, change, tolerance(table.weight.dtype))
            if fitted is not None:
                return Fit(fitted[0], fitted[1].to(torch.float32), where, float(x.abs().max()))
        if self.error is not None and found.end is None:
            return f"the model's forward failed before its first block ({self.error})"
        return "no module input before the first block is s·E[ids] + P (a projection or a norm comes first?)"


def tolerance(dtype: torch.dtype) -> float:
    """The relative residual a fit may leave: float32 rounding, or 16-bit rounding of the model's own arithmetic."""
    return 5e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-3


def _fit(x: torch.Tensor, rows: torch.Tensor, change: torch.Tensor, limit: float) -> tuple[float, torch.Tensor] | None:
    """(s, P) when x = s · rows + P with P the same for both rows (least squares on the rows' difference), else None."""
    moved = x[0] - x[1]
    size = float(moved.norm())
    scale = float((moved * change).sum() / (change * change).sum())
    if size == 0.0 or scale == 0.0 or not torch.isfinite(moved).all():
        return None
    if float((moved - scale * change).norm()) > limit * size:
        return None
    return scale, x[0] - scale * rows[0]


def blocks(model: nn.Module) -> dict[int, str]:
    """id → path of the modules held in an ``nn.ModuleList`` (a model's layers, where the probe stops)."""
    return {
        id(child): f"{path}.{name}" if path else name
        for path, module in model.named_modules()
        if isinstance(module, nn.ModuleList)
        for name, child in module.named_children()
    }


def cannot_probe(model: nn.Module) -> str | None:
    """Why the probe cannot run the model: no values (meta device), or parameters split over processes (a DTensor,
    FSDP's flat parameters, DeepSpeed ZeRO-3), whose forward on one process could wait on the others; else None."""
    if any("FullyShardedDataParallel" in type(module).__name__ for module in model.modules()):
        return "the model is wrapped by FSDP: its forward gathers parameters from every process"
    for tensor in [*model.parameters(), *model.buffers()]:
        if type(tensor).__name__ in ("DTensor", "FlatParameter") or hasattr(tensor, "ds_id"):
            return "the model's parameters are sharded over processes: its forward cannot run on one alone"
        if tensor.is_meta:
            return "the model is on the meta device: it has no values to run"
    if next(iter(model.parameters()), None) is None:
        return "the model has no parameters"
    return None


def _first_tensor(args: tuple, kwargs: dict) -> torch.Tensor | None:
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    value = kwargs.get("hidden_states", kwargs.get("inputs_embeds"))
    return value if isinstance(value, torch.Tensor) else None


def _hooks(model: nn.Module, streams: dict[str, _Stream], records: list, widths: set[int]) -> Callable:
    """The forward pre-hook: note which tables the streams' ids reach, record 3-D float inputs as wide as a table
    ``(path, copy)``, mark each stream's first block after its table, and stop once every stream reached one."""
    paths = {id(module): path for path, module in model.named_modules()}
    layers = blocks(model)

    def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
        x = _first_tensor(args, kwargs)
        if x is not None and x.dim() == 3 and x.is_floating_point() and x.shape[-1] in widths:
            if any(stream.holds(x) for stream in streams.values()):
                records.append((paths.get(id(module), "?"), x.detach().clone()))
        if id(module) in layers:
            for stream in streams.values():
                if stream.start is not None and stream.end is None:
                    stream.end = len(records)
            if all(stream.end is not None for stream in streams.values()):
                raise _Stop

    return hook


def _lookups(streams: dict[str, _Stream], records: list) -> Callable:
    """The forward hook of every ``nn.Embedding``: a table that looked up a stream's ids (a plain ``nn.Embedding``
    lookup, or each output vector a multiple of the table's row at that id; a position table fed the ids only for
    their shape is not) joins the stream."""

    def hook(module: nn.Module, args: tuple, output: object) -> None:
        if not (args and isinstance(args[0], torch.Tensor) and isinstance(output, torch.Tensor)):
            return
        for stream in streams.values():
            placed = stream.place(args[0]) if args[0].dim() == 2 and not args[0].is_floating_point() else None
            if placed is None or int(args[0].max()) >= module.weight.shape[0] or output.shape[:2] != args[0].shape:
                continue
            plain = type(module).forward is nn.Embedding.forward  # a lookup, whatever the rows hold (zeros too)
            rows = module.weight.detach()[args[0].to(module.weight.device)].to(torch.float64)
            looked = output.detach().to(rows.device, torch.float64)
            if not plain and (
                looked.shape != rows.shape or not _row_multiples(looked, rows, tolerance(module.weight.dtype))
            ):
                continue
            stream.tables.append(module)
            if stream.start is None:
                stream.start, (stream.transposed, stream.offset) = len(records), placed
                stream.seen = tuple(args[0].shape)

    return hook


def _row_multiples(looked: torch.Tensor, rows: torch.Tensor, limit: float) -> bool:
    """Whether each looked-up vector is a multiple of its row (cosine 1 to within ``limit``; zero rows skipped)."""
    norms = looked.norm(dim=-1) * rows.norm(dim=-1)
    used = norms > 0
    if not bool(used.any()):
        return False
    cosine = (looked * rows).sum(dim=-1)[used] / norms[used]
    return bool((1 - cosine).abs().max() <= limit)


def probe_ids(vocabulary: int, length: int, avoid: set[int], seed: int) -> torch.Tensor:
    """(2, ``length``) ids below ``vocabulary`` avoiding ``avoid`` (padding and special ids), the two rows different."""
    allowed = torch.tensor([i for i in range(vocabulary) if i not in avoid] or list(range(vocabulary)))
    generator = torch.Generator().manual_seed(seed)
    picked = allowed[torch.randint(0, allowed.numel(), (ROWS, length), generator=generator)]
    if allowed.numel() > 1 and torch.equal(picked[0], picked[1]):
        picked[1] = allowed[(torch.searchsorted(allowed, picked[1]) + 1) % allowed.numel()]
    return picked


def observe(model: nn.Module, run: Runner, streams: dict[str, torch.Tensor], widths: set[int]) -> Observation | str:
    """Run ``run`` on the streams' ids (``input``, and ``decoder`` for an encoder–decoder) with the recording hooks, in
    eval mode without gradients (every module's mode restored after); the observation, or why it could not run."""
    reason = cannot_probe(model)
    if reason is not None:
        return reason
    device = next(iter(model.parameters())).device
    state = {name: _Stream(ids.to(device)) for name, ids in streams.items()}
    records: list[tuple[str, torch.Tensor]] = []
    hook = _hooks(model, state, records, widths)
    handles = [module.register_forward_pre_hook(hook, with_kwargs=True) for module in _distinct(model)]
    lookups = _lookups(state, records)
    handles += [m.register_forward_hook(lookups) for m in _distinct(model) if isinstance(m, nn.Embedding)]
    modes = {module: module.training for module in model.modules()}
    failure = None
    model.eval()
    try:
        with torch.no_grad():
            run(state["input"].ids, state["decoder"].ids if "decoder" in state else None)
    except _Stop:
        pass
    except Exception as error:  # noqa: BLE001 - any failure of the model's own forward: fall back, saying why
        failure = f"{type(error).__name__}: {str(error)[:160]}"
        if not any(stream.start is not None for stream in state.values()):
            return f"the model's forward failed on probe ids ({failure})"
    finally:
        for handle in handles:
            handle.remove()
        for module, training in modes.items():
            module.training = training
    return Observation(state, records, failure)


def _distinct(model: nn.Module) -> Iterator[nn.Module]:
    seen: set[int] = set()
    for module in model.modules():
        if id(module) not in seen:
            seen.add(id(module))
            yield module


def find_rows(model: nn.Module, added: torch.Tensor, skip: set[int], limit: float) -> tuple[str, str, int, str] | None:
    """A parameter, buffer or tensor attribute outside the model's blocks whose rows from some offset are ``added``
    (T, D) to within ``limit``: (module path, attribute name, offset, what it is in words), else None."""
    inside = set(blocks(model))
    for path, name, tensor in _loose_tensors(model, inside):
        if id(tensor) in skip or tensor.dim() != 2 or tensor.shape[1] != added.shape[1]:
            continue
        if tensor.shape[0] < added.shape[0] or not tensor.is_floating_point():
            continue
        values = tensor.detach().to(added.device, torch.float32)
        for offset in (values - added[0]).abs().amax(dim=1).le(limit).nonzero().flatten().tolist():
            window = values[offset : offset + added.shape[0]]
            if window.shape == added.shape and bool((window - added).abs().le(limit).all()):
                kind = "learned table" if isinstance(tensor, nn.Parameter) else "fixed rows"
                return path, name, offset, f"{kind} {path}.{name}" if path else f"{kind} {name}"
    return None


def _loose_tensors(model: nn.Module, inside: set[int]) -> Iterator[tuple[str, str, torch.Tensor]]:
    """(module path, name, tensor) of every parameter, buffer and tensor attribute outside the blocks."""

    def visit(path: str, module: nn.Module) -> Iterator[tuple[str, str, torch.Tensor]]:
        if id(module) in inside:
            return
        held = {**module._parameters, **module._buffers}
        held |= {k: v for k, v in vars(module).items() if isinstance(v, torch.Tensor) and not k.startswith("_")}
        for name, tensor in held.items():
            if tensor is not None:
                yield path, name, tensor
        for name, child in module.named_children():
            yield from visit(f"{path}.{name}" if path else name, child)

    yield from visit("", model)
