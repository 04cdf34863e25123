"""Hugging Face ``PreTrainedModel``: its token tables are ``get_input_embeddings()`` and, in an encoder–decoder whose
decoder has a table of its own (Marian with ``share_encoder_decoder_embeddings=False``, FSMT), the decoder's.

- Scale and positions: the names and flags of :mod:`~.hugging_face_names`, checked by running the model's own
  forward on probe ids (:mod:`~.probe`, :mod:`~.settle`); the report says how each was found. The probe also finds
  the decoder's own table (the one the decoder ids are looked up in) and the other tables the same ids are looked up
  in, which follow the vocabulary (:mod:`~.companions`).
- Output: ``get_output_embeddings()`` (FSMT: the decoder's ``output_projection``) belongs to the table the decoder
  reads, tied when it shares the weight, when it has one output per row of it; a tied head's bias, the other
  tensors over the vocabulary beside the head (ESM's ``lm_head.bias``) and ``final_logits_bias`` follow that table.
- Padding row: the table's ``padding_idx``, else ``config.pad_token_id``.
- Vocabulary size after a resize, as ``resize_token_embeddings`` / ``resize_decoder_token_embeddings`` keep it: the
  (text) config's ``vocab_size`` (FSMT: ``src_vocab_size``) and the model's own, plus ``decoder_vocab_size`` when the
  decoder shares the table; a decoder's own table: ``decoder_vocab_size`` (Marian) or ``tgt_vocab_size`` (FSMT); an
  ``EncoderDecoderModel``'s part: that part's own config; then the model's declared ties are made again
  (``tie_weights()``), as transformers' resize ends.
"""

from __future__ import annotations

import inspect
import sys
import weakref

import torch
from torch import nn

from lightning_embinit.init.families import hugging_face_names as names
from lightning_embinit.init.families.base import FAMILIES, Family, TokenTable, module_path
from lightning_embinit.init.families.companions import by_name, follower
from lightning_embinit.init.families.probe import LENGTH, observe, probe_ids
from lightning_embinit.init.families.settle import Finding, Settled, cached, find, settle, table_key

DECODER_SIZE_FIELDS = ("decoder_vocab_size", "tgt_vocab_size")


def is_hugging_face(module: nn.Module) -> bool:
    if "transformers" not in sys.modules:  # no PreTrainedModel exists before transformers is imported
        return False
    from transformers import PreTrainedModel

    if not isinstance(module, PreTrainedModel):
        return False
    try:
        return isinstance(module.get_input_embeddings(), nn.Embedding)
    except (NotImplementedError, AttributeError):
        return False


def _runner(model: nn.Module):
    accepted = inspect.signature(model.forward).parameters

    def run(ids: torch.Tensor, decoder_ids: torch.Tensor | None) -> object:
        inputs = {"input_ids": ids}
        if decoder_ids is not None:
            inputs["decoder_input_ids"] = decoder_ids
        if "use_cache" in accepted or any(p.kind is p.VAR_KEYWORD for p in accepted.values()):
            inputs["use_cache"] = False  # no cache: some hybrid models cannot build one for a single layer
        return model(**inputs)

    return run


def _streams(model: nn.Module, tables: dict[str, nn.Embedding], lengths: dict[str, int]) -> dict[str, torch.Tensor]:
    avoid = names.special_ids(model) | {t.padding_idx for t in tables.values() if t.padding_idx is not None}
    return {
        stream: probe_ids(tables.get(stream, tables["input"]).num_embeddings, lengths[stream], avoid, seed)
        for seed, stream in enumerate(lengths)
    }


def _probe(model: nn.Module, primary: nn.Embedding, by_name: nn.Embedding | None) -> dict[str, object]:
    """The probe's findings: per stream the decoder table's path (``decoder_table``) and a :class:`Finding`."""
    decoding = names.decoder_module(model) is not None
    lengths = {"input": LENGTH, **({"decoder": LENGTH} if decoding else {})}
    tables = {"input": primary, **({"decoder": by_name} if by_name is not None else {})}
    observed = observe(model, _runner(model), _streams(model, tables, lengths), {primary.embedding_dim})
    found: dict[str, object] = {"decoder_table": None if by_name is None else module_path(model, by_name)}
    if isinstance(observed, str):
        return {**found, "input": Finding(None, None, "unknown", reason=observed), "decoder": observed}
    own = [t for t in observed.tables("decoder") if getattr(t, "weight", None) is not primary.weight]
    if decoding and observed.tables("decoder"):
        found["decoder_table"] = module_path(model, own[0]) if own else None
    skip = {id(t.weight) for t in (primary, *own)}
    found["input"] = find(
        model, observed.fit("input", primary), _claim(model, primary, None), primary.weight.dtype, skip
    )
    decoder = None if found["decoder_table"] is None else model.get_submodule(found["decoder_table"])
    if decoder is not None:
        fit = observed.fit("decoder", decoder)
        found["decoder"] = find(model, fit, _claim(model, decoder, "decoder"), decoder.weight.dtype, skip)
    found["companions"] = {
        stream: [
            module_path(model, t)
            for t in observed.tables(stream)
            if id(t.weight) not in skip
            and t.num_embeddings == (decoder or primary if stream == "decoder" else primary).num_embeddings
        ]
        for stream in ("input", "decoder")
    }
    return found


def _claim(model: nn.Module, table: nn.Embedding, stream: str | None):
    scope = names.decoder_module(model) if stream == "decoder" else model
    return names.claim(model, scope or model, table)


def _measure(model: nn.Module, stream: str, path: str):
    """The added rows over every position, from a probe as long as the model's positions (rows no table holds)."""
    held = weakref.ref(model)

    def rows() -> torch.Tensor | None:
        root = held()
        if root is None:
            return None
        table = root.get_submodule(path)
        lengths = {"input": LENGTH, **({"decoder": LENGTH} if names.decoder_module(root) is not None else {})}
        lengths[stream] = names.positions_length(root)
        tables = {"input": root.get_input_embeddings(), stream: table}
        observed = observe(root, _runner(root), _streams(root, tables, lengths), {table.embedding_dim})
        fit = observed if isinstance(observed, str) else observed.fit(stream, table)
        return None if isinstance(fit, str) else fit.added

    return rows


def _settled(model: nn.Module, table: nn.Embedding, stream: str, finding: object) -> Settled:
    if not isinstance(finding, Finding):
        finding = Finding(None, None, "unknown", reason=str(finding))
    return settle(model, _claim(model, table, stream), finding, _measure(model, stream, module_path(model, table)))


def token_tables(model: nn.Module) -> list[TokenTable]:
    primary = model.get_input_embeddings()
    by_name = names.decoder_table(model, primary)
    candidates = [primary] + ([by_name] if by_name is not None else [])
    found = cached(model, table_key(model, candidates), lambda: _probe(model, primary, by_name))
    decoder = None if found["decoder_table"] is None else model.get_submodule(found["decoder_table"])
    probed = found.get("companions") or {}
    shared = decoder is None
    companions = [*probed.get("input", []), *(probed.get("decoder", []) if shared else [])]
    settled = _settled(model, primary, "input", found["input"])
    tables = [_table(model, primary, settled, head=shared, companions=companions)]
    if decoder is not None:
        settled = _settled(model, decoder, "decoder", found.get("decoder", "the decoder was not probed"))
        tables.append(_table(model, decoder, settled, head=True, decoder=True, companions=probed.get("decoder", [])))
    return tables


def _head(model: nn.Module, table: nn.Embedding) -> nn.Linear | None:
    """The output layer over the table's vocabulary: ``get_output_embeddings()`` (FSMT's ``output_projection`` where
    that is the decoder's table itself), when it has one output per row of the table."""
    output = model.get_output_embeddings()
    if output is table or isinstance(output, nn.Embedding):
        decoder = names.decoder_module(model)
        output = getattr(decoder, "output_projection", None) if decoder is not None else None
    if not isinstance(output, nn.Linear) or output.weight.shape[0] != table.num_embeddings:
        return None  # a head over other rows (Mllama's table holds image rows past the vocabulary) is not this one's
    return output


def _head_biases(model: nn.Module, table: nn.Embedding, output: nn.Linear | None) -> list[str]:
    """The tensors with one entry per token along their last dimension that follow the head: a tied head's bias (an
    untied head's follows it as an output layer), the others the head's owner holds (ESM's ``lm_head.bias``, Dory's
    ``logit_scale``, MobileBERT's ``dense`` columns), BART's ``final_logits_bias``."""
    found: list[str] = []
    if output is not None:
        path = module_path(model, output)
        if output.weight is table.weight and output.bias is not None:
            found.append(f"{path}.bias")
        owner = path.rpartition(".")[0]
        seen = {id(output.weight), id(output.bias)}  # the head's bias: above when tied, else it follows the head
        for name, tensor in _beside(model.get_submodule(owner), output, deep=bool(owner)):
            if id(tensor) not in seen and tensor.dim() >= 1 and tensor.shape[-1] == table.num_embeddings:
                seen.add(id(tensor))
                found.append(f"{owner}.{name}" if owner else name)
    if isinstance(getattr(model, "final_logits_bias", None), torch.Tensor):
        found.append("final_logits_bias")
    return list(dict.fromkeys(found))


def _beside(owner: nn.Module, output: nn.Module, *, deep: bool) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) of the parameters and buffers of the head's owner and the head, and (``deep``: an owner that
    is not the whole model) of the owner's other children."""
    children = [(name, child) for name, child in owner.named_children() if deep or child is output]
    held = [(name, t) for name, t in [*owner._parameters.items(), *owner._buffers.items()] if t is not None]
    for prefix, child in children:
        held += [
            (f"{prefix}.{n}", t) for n, t in [*child._parameters.items(), *child._buffers.items()] if t is not None
        ]
    return held


def _table(
    model: nn.Module,
    table: nn.Embedding,
    settled: Settled,
    *,
    head: bool,
    decoder: bool = False,
    companions: list[str] = (),
) -> TokenTable:
    output = _head(model, table) if head else None
    tied = output is not None and output.weight is table.weight
    padding = table.padding_idx if table.padding_idx is not None else getattr(model.config, "pad_token_id", None)
    follow = follower(model, table, list(dict.fromkeys([*companions, *by_name(model, table)])))
    return TokenTable(
        path=module_path(model, table),
        input_scale=settled.input_scale,
        positions=settled.positions,
        positional_rows=settled.positional_rows,
        padding_idx=padding if isinstance(padding, int) and 0 <= padding < table.num_embeddings else None,
        output_layers=() if output is None or tied else (module_path(model, output),),
        vocabulary_biases=tuple(_head_biases(model, table, output) if head else ()),
        after_resize=_resizer(model, table, follow, decoder=decoder, shared=head and not decoder),
        input_scale_found_by=settled.input_scale_found_by,
        positions_found_by=settled.positions_found_by,
    )


def _resizer(model: nn.Module, table: nn.Embedding, follow, *, decoder: bool, shared: bool):
    held = weakref.ref(model)
    owner = _composite_part(model, table)

    def after_resize(size: int, source_ids: torch.Tensor | None = None) -> None:
        root = held()
        if root is None:
            return
        if owner is not None:  # an EncoderDecoderModel's part: its own resize keeps its own config
            _set_vocab_size(root.get_submodule(owner), size, shared=False)
        else:
            (_set_decoder_size if decoder else _set_vocab_size)(root, size, shared=shared)
        follow(size, source_ids)
        if callable(getattr(root, "tie_weights", None)):
            root.tie_weights()  # as resize_token_embeddings ends: the ties the model declares, made again

    return after_resize


def _composite_part(model: nn.Module, table: nn.Embedding) -> str | None:
    """``encoder`` or ``decoder`` when ``model`` joins two models with configs of their own (``EncoderDecoderModel``)
    and ``table`` sits in that one; else None."""
    for part in ("encoder", "decoder"):
        inner = getattr(model, part, None)
        config = getattr(model.config, part, None)
        if isinstance(inner, nn.Module) and config is not None and getattr(inner, "config", None) is config:
            if any(module is table for module in inner.modules()):
                return part
    return None


def _set_vocab_size(model: nn.Module, size: int, *, shared: bool) -> None:
    """What ``resize_token_embeddings`` keeps in step: the (text) config's ``vocab_size`` (FSMT's ``src_vocab_size``)
    and the model's ``vocab_size`` attribute (set, as transformers sets it); Marian's ``decoder_vocab_size`` too when
    its decoder reads this table."""
    config = model.config
    if hasattr(config, "src_vocab_size"):
        config.src_vocab_size = size
    else:
        names.text_config(model).vocab_size = size
    model.vocab_size = size
    if shared and hasattr(config, "decoder_vocab_size"):
        config.decoder_vocab_size = size


def _set_decoder_size(model: nn.Module, size: int, *, shared: bool) -> None:
    """What ``resize_decoder_token_embeddings`` keeps in step: ``decoder_vocab_size`` (Marian), or FSMT's
    ``tgt_vocab_size``."""
    for field in DECODER_SIZE_FIELDS:
        if hasattr(model.config, field):
            setattr(model.config, field, size)
            return


@FAMILIES.register("hugging_face", summary="transformers PreTrainedModel (get_input_embeddings, its config)")
def hugging_face() -> Family:
    return Family(
        "hugging_face",
        is_hugging_face,
        token_tables,
        lambda model: f"{type(model).__name__} ({getattr(model.config, 'model_type', '?')})",
    )
