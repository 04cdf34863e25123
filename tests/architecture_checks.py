"""The checks the every-architecture tests run on one tiny model, each against the model itself: its own forward
(read by hooks, with the token table swapped through ``torch.func.functional_call``) and transformers' own
``resize_token_embeddings`` / ``resize_decoder_token_embeddings``."""

from __future__ import annotations

import copy
import inspect

import torch
from torch import nn

from lightning_embinit import EmbeddingInitCallback, EmbeddingVarianceMonitor
from lightning_embinit.init.extension import extend_vocabulary
from lightning_embinit.init.host import EmbeddingSlot, discover_slots
from tests.family_models import Holder
from tests.tiny_architectures import EXTENSION_DIFFERS

T_IDS = 8


def forward_inputs(model: nn.Module, decoder: bool, ids: torch.Tensor, decoder_ids: torch.Tensor) -> dict:
    """The keyword arguments of the model's forward for ``ids`` (and ``decoder_ids`` for an encoder–decoder)."""
    accepted = inspect.signature(model.forward).parameters
    inputs = {"input_ids": ids}
    if decoder:
        inputs["decoder_input_ids"] = decoder_ids
    if "use_cache" in accepted or any(p.kind is p.VAR_KEYWORD for p in accepted.values()):
        inputs["use_cache"] = False
    return inputs


def is_encoder_decoder(model: nn.Module) -> bool:
    return bool(getattr(model.config, "is_encoder_decoder", False))


def probe_batch(model: nn.Module, rows: int, seed: int) -> torch.Tensor:
    """(2, T) ids below ``rows``, avoiding the config's special ids (they may steer positions or masks)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    special = {v for k, v in config.to_dict().items() if "token_id" in str(k) and isinstance(v, int)}
    allowed = torch.tensor([i for i in range(rows) if i not in special and i > 2])
    generator = torch.Generator().manual_seed(seed)
    return allowed[torch.randint(0, allowed.numel(), (2, T_IDS), generator=generator)]


def placement(seen: torch.Tensor, ids: torch.Tensor) -> tuple[bool, int] | None:
    """(sequence first, offset) when the integer tensor ``seen`` holds ``ids`` as a window along its sequence
    (a model may prepend prompt ids, pad, or go sequence first), else None."""
    if not isinstance(seen, torch.Tensor) or seen.dim() != 2 or seen.is_floating_point():
        return None
    for transposed, held in ((False, seen), (True, seen.T)):
        if held.shape[0] == ids.shape[0] and held.shape[1] >= ids.shape[1]:
            for offset in range(held.shape[1] - ids.shape[1] + 1):
                if torch.equal(held[:, offset : offset + ids.shape[1]].long(), ids):
                    return transposed, offset
    return None


def looked_up_tables(model: nn.Module, inputs: dict) -> dict[str, list[nn.Embedding]]:
    """Per id stream (``input_ids``, ``decoder_input_ids``): the ``nn.Embedding`` modules that looked those ids up
    (each output vector along its row at that id), in call order; a position table fed the ids for their shape is
    not one."""
    found: dict[str, list[nn.Embedding]] = {"input_ids": [], "decoder_input_ids": []}

    def hook(module, args, output):
        for stream in found:
            ids = inputs.get(stream)
            if ids is None or not args or placement(args[0], ids) is None:
                continue
            if int(args[0].max()) >= module.num_embeddings or not isinstance(output, torch.Tensor):
                continue
            rows = module.weight.detach()[args[0].long()].double()
            out = output.detach().double()
            cosine = torch.nn.functional.cosine_similarity(out, rows, dim=-1)
            nonzero = rows.norm(dim=-1) > 0
            if bool(nonzero.any()) and float((1 - cosine[nonzero]).abs().max()) < 1e-4 and module not in found[stream]:
                found[stream].append(module)

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, nn.Embedding)]
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        for handle in handles:
            handle.remove()
    return found


def first_layer_window(model: nn.Module, table: nn.Embedding, ids: torch.Tensor, inputs: dict, weight: torch.Tensor):
    """The module inputs, as (B, T, D) at the ids' positions, of the model's forward with its table's weight set to
    ``weight``: from the table's lookup of ``ids`` (by any module holding that weight) to the first block (a child of
    an ``nn.ModuleList``) entered after it, that block's input included."""
    layers = {id(child) for m in model.modules() if isinstance(m, nn.ModuleList) for child in m.children()}
    names = {id(m): n for n, m in model.named_modules()}
    state: dict = {"placed": None, "done": False}
    window: list[tuple[str, torch.Tensor]] = []

    def pre(module, args, kwargs):
        if state["done"] or state["placed"] is None:
            return
        offset = state["placed"][1]
        x = args[0] if args and isinstance(args[0], torch.Tensor) else kwargs.get("hidden_states")
        if (
            isinstance(x, torch.Tensor)
            and x.dim() == 3
            and x.is_floating_point()
            and x.shape[-1] == table.embedding_dim
        ):
            for layout in (x, x.transpose(0, 1)):  # batch first, or sequence first; padded or with prompts around
                if layout.shape[0] == ids.shape[0] and layout.shape[1] >= offset + ids.shape[1]:
                    window.append((names[id(module)], layout[:, offset : offset + ids.shape[1]].detach().clone()))
                    break
        if id(module) in layers:
            state["done"] = True

    def post(module, args, output):
        if state["placed"] is None and args:
            state["placed"] = placement(args[0], ids)

    holders = [m for m in model.modules() if isinstance(m, nn.Embedding) and m.weight is table.weight]
    handles = [m.register_forward_pre_hook(pre, with_kwargs=True) for m in model.modules()]
    handles += [m.register_forward_hook(post) for m in holders]
    name = next(n for n, p in model.named_parameters(remove_duplicate=False) if p is table.weight)
    try:
        with torch.no_grad():
            torch.func.functional_call(model, {name: weight}, args=(), kwargs=inputs)
    finally:
        for handle in handles:
            handle.remove()
    return window


def check_scale_and_positions(model: nn.Module, slot: EmbeddingSlot, stream: str, inputs: dict) -> None:
    """The slot's s and P are what the model computes: at the last input before its first layer that moves with the
    table (swapping E for E + Δ moves it by exactly c · Δ[ids]), c is the slot's input scale and what remains
    beside c · E[ids] is the slot's positional rows (zero when it has none)."""
    table, ids = slot.embedding, inputs[stream]
    weight = table.weight.detach()
    delta = torch.randn(weight.shape, generator=torch.Generator().manual_seed(5)).to(weight) * weight.float().std()
    before = first_layer_window(model, table, ids, inputs, weight)
    after = first_layer_window(model, table, ids, inputs, weight + delta)
    assert len(before) == len(after)
    moved = delta[ids].double()
    for (module, x), (_, y) in reversed(list(zip(before, after))):
        response = (y - x).double()
        c = float((response * moved).sum() / (moved * moved).sum())
        if c != 0.0 and float((response - c * moved).norm()) <= 1e-4 * float(response.norm()):
            where = module
            break
    else:  # a projection, a norm or a concatenation first (s · E + P does not describe the model): say so
        assert "probe: " in str(slot.input_scale_found_by), (slot.name, slot.input_scale_found_by)
        return
    assert c == torch.tensor(slot.input_scale).double().item() or abs(c / slot.input_scale - 1) < 1e-3, (where, c)
    added = x.double() - slot.input_scale * weight[ids].double()
    rows = slot.positional_encoding() if slot.positional_encoding is not None else None
    expected = torch.zeros_like(added[0]) if rows is None else rows.double()[: ids.shape[1]].expand_as(added[0])
    limit = 1e-5 * float(x.abs().max()) + 1e-7
    assert float((added - expected).abs().max()) <= limit, (
        where,
        float((added - expected).abs().max()),
        slot.positions,
    )


def parameters_and_buffers(module: nn.Module) -> dict[str, torch.Tensor]:
    return dict([*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)])


def tie_groups(module: nn.Module) -> set[frozenset[str]]:
    """The names of the parameters, grouped by the tensor they are (a tie: one group of several names)."""
    groups: dict[int, set[str]] = {}
    for name, tensor in module.named_parameters(remove_duplicate=False):
        groups.setdefault(id(tensor), set()).add(name)
    return {frozenset(group) for group in groups.values()}


def check_callback(holder: nn.Module, slots: dict[str, EmbeddingSlot], tables: set[int]) -> None:
    """The callback writes every token table (``tables``: their weights' ids) and nothing else; ties stay one tensor."""
    before = {name: tensor.detach().clone() for name, tensor in parameters_and_buffers(holder).items()}
    held = {name: tensor for name, tensor in parameters_and_buffers(holder).items()}
    ties = tie_groups(holder)
    reports = EmbeddingInitCallback(source="xavier", seed=0, verbose=False).initialize(holder)
    assert set(reports) == set(slots)
    after = parameters_and_buffers(holder)
    for name, tensor in after.items():
        assert tensor is held[name], f"{name} was replaced, not written in place"
        changed = not torch.equal(before[name], tensor.detach())
        assert changed == (id(tensor) in tables), f"{name}: changed={changed}, a token table={id(tensor) in tables}"
    assert tie_groups(holder) == ties


def check_monitor(holder: nn.Module, slots: dict[str, EmbeddingSlot]) -> None:
    """The variance monitor measures every slot at its scale and positions."""
    measured = EmbeddingVarianceMonitor(sample_rows=32).measure(holder)
    assert set(measured) == set(slots)
    for name, values in measured.items():
        rows = slots[name].positional_encoding() if slots[name].positional_encoding is not None else None
        assert (values.get("no_additive_positional_encoding") == 1.0) == (rows is None), name
        assert values["input_scale"] == slots[name].input_scale


def resize_like_transformers(name: str, reference: nn.Module, slots: list[EmbeddingSlot], sizes: list[int]) -> None:
    """transformers' own resize of each table, ``mean_resizing=True``: ``resize_token_embeddings`` for the model's
    input table, then ``resize_decoder_token_embeddings`` for a decoder's own table where the model has it (T5Gemma's
    ``resize_token_embeddings`` grows both); an ``EncoderDecoderModel`` refuses and says to resize its two models."""
    if name == "encoder-decoder":
        reference.encoder.resize_token_embeddings(sizes[0], mean_resizing=True)
        reference.decoder.resize_token_embeddings(sizes[-1], mean_resizing=True)
        return
    options = (
        {"mean_resizing": True}
        if "mean_resizing" in inspect.signature(reference.resize_token_embeddings).parameters
        else {}
    )
    reference.resize_token_embeddings(sizes[0], **options)  # MobileBERT's own override takes no mean_resizing
    if len(slots) > 1 and hasattr(reference, "resize_decoder_token_embeddings"):
        reference.resize_decoder_token_embeddings(sizes[1])


def _differences(ours: nn.Module, theirs: nn.Module) -> list[str]:
    """Where the extended model and transformers' resized one differ: tensor shapes, ties, config, ``vocab_size``."""
    found = []
    shapes = [{k: tuple(v.shape) for k, v in m.state_dict().items()} for m in (ours, theirs)]
    found += [
        f"{k}: ours {shapes[0].get(k)}, theirs {shapes[1].get(k)}"
        for k in shapes[0].keys() | shapes[1].keys()
        if shapes[0].get(k) != shapes[1].get(k)
    ]
    if tie_groups(ours) != tie_groups(theirs):
        found.append(
            f"ties: ours {tie_groups(ours) - tie_groups(theirs)}, theirs {tie_groups(theirs) - tie_groups(ours)}"
        )
    configs = [m.config.to_dict() for m in (ours, theirs)]
    found += [
        f"config {k}: ours {configs[0].get(k)}, theirs {configs[1].get(k)}"
        for k in configs[0].keys() | configs[1].keys()
        if configs[0].get(k) != configs[1].get(k)
    ]
    if getattr(ours, "vocab_size", None) != getattr(theirs, "vocab_size", None):
        found.append(
            f"vocab_size: ours {getattr(ours, 'vocab_size', None)}, theirs {getattr(theirs, 'vocab_size', None)}"
        )
    return found


def check_extension(name: str, holder: nn.Module, reference: nn.Module, slots: list[EmbeddingSlot]) -> None:
    """``extend_vocabulary`` on each slot gives transformers' shapes, config and ties (where transformers differs,
    :data:`~tests.tiny_architectures.EXTENSION_DIFFERS` says why); old rows are kept bit for bit; the model runs."""
    model = holder.backbone
    before = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    sizes = [slot.num_embeddings + 3 for slot in slots]
    for slot in slots:
        old = [f"tok{i}" for i in range(slot.num_embeddings)]
        extend_vocabulary(holder, [*old, "fresh", "newer", "newest"], old_tokens=old, slot=slot.name, rule="mean")
    for key, old in before.items():
        new = model.state_dict()[key]
        assert torch.equal(new[tuple(slice(0, n) for n in old.shape)] if new.shape != old.shape else new, old), key
    if name in EXTENSION_DIFFERS:
        return
    resize_like_transformers(name, reference, slots, sizes)
    assert not (found := _differences(model, reference)), found
    ids = torch.tensor([[5, sizes[0] - 1, sizes[0] - 2, 7, 8, 9, 10, 11]])
    decoder_ids = torch.tensor([[5, sizes[-1] - 1, sizes[-1] - 3, 6, 7, 8, 9, 10]])
    with torch.no_grad():
        output = model(**forward_inputs(model, is_encoder_decoder(model), ids, decoder_ids))
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        assert logits.shape[-1] == sizes[-1], (name, tuple(logits.shape))


def check_architecture(name: str, model: nn.Module) -> dict:
    """Every check on one tiny model; returns what was found (for the tests' summary)."""
    reference = copy.deepcopy(model)
    holder = Holder(model)
    slots = discover_slots(holder)
    decoder = is_encoder_decoder(model)
    first = model.get_input_embeddings()
    ids = probe_batch(model, first.num_embeddings, 0)
    decoder_ids = probe_batch(model, first.num_embeddings, 1)
    inputs = forward_inputs(model, decoder, ids, decoder_ids)
    looked = looked_up_tables(model, inputs)
    tables = {id(t.weight) for stream in looked.values() for t in stream[:1]}
    assert {id(slot.weight) for slot in slots.values()} == tables, (list(slots), looked)
    ordered = sorted(slots.values(), key=lambda s: s.weight is not first.weight)
    for slot in ordered:
        stream = "input_ids" if slot.weight is first.weight else "decoder_input_ids"
        check_scale_and_positions(model, slot, stream, inputs)
    check_monitor(holder, slots)
    check_callback(holder, slots, tables)
    check_extension(name, holder, reference, ordered)
    return {slot.name: (slot.input_scale_found_by, slot.positions_found_by, slot.positions) for slot in ordered}
