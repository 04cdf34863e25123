"""What the systems' ``predict_step`` and the ``embinit translate|generate|classify`` commands share: one path from a
batch of text to prediction records, and the sampling loop of the two language models.

A *record* is a dict per example: ``index`` (the example's row: the order it came in) and the input and output
under the names of :data:`OUTPUT_FIELDS` — ``{"index", "source", "translation"}`` for a translation system,
``{"index", "prompt", "continuation"}`` for a language model, ``{"index", "text", "label", "probabilities"}`` (and
``text_pair``) for a classifier. An input that is blank (empty or white space only) is not run through the model: its
output is empty (``""``; a classifier's ``label`` and ``probabilities`` are ``None``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from lightning_embinit.checks import check_non_negative_int, check_positive_int, check_range

OUTPUT_FIELDS = {"translation": "source", "continuation": "prompt", "label": "text"}
"""A record's output field → its input field (the first output field a record has is its output)."""


def is_blank(text: Any) -> bool:
    """Whether ``text`` is a string with no character but white space (it gets an empty output)."""
    return isinstance(text, str) and not text.strip()


def next_token(logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator) -> int:
    """The id chosen from (n,) logits: the most likely at temperature 0, else one drawn from softmax(logits /
    temperature) over the ``top_k`` most likely (all when None)."""
    if temperature == 0:
        return int(logits.argmax())
    if top_k is not None and top_k < logits.numel():
        logits = logits.masked_fill(logits < logits.topk(top_k).values[-1], float("-inf"))
    return int(torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator))


@torch.no_grad()
def continue_ids(
    last_logits: Callable[[list[int]], torch.Tensor],
    ids: list[int],
    count: int,
    window: int | None,
    banned: Sequence[int],
    eos: int | None,
    temperature: float,
    top_k: int | None,
    generator: torch.Generator,
) -> list[int]:
    """Up to ``count`` ids after ``ids``, each :func:`next_token` of ``last_logits`` (the model's (n,) logits after
    a context) over the last ``window`` ids (all when None), never one of ``banned``, ending before ``eos``."""
    new: list[int] = []
    for _ in range(count):
        context = ids + new
        logits = last_logits(context[-window:] if window else context).float()
        logits[list(banned)] = float("-inf")
        token = next_token(logits, temperature, top_k, generator)
        if token == eos:
            break
        new.append(token)
    return new


@dataclass(frozen=True)
class Generation:
    """How a language model continues a prompt: up to ``max_new_tokens`` tokens, greedy at ``temperature`` 0, else
    sampled among the ``top_k`` most likely (all when None); the prompt of row k samples with a generator seeded by
    ``seed + k`` (the same continuation whatever the batch or process it is in); ``ban_unk``: never the unknown
    token (else it may be chosen, and a word-level model prints it as ``<unk>``)."""

    max_new_tokens: int = 20
    temperature: float = 0.0
    top_k: int | None = None
    seed: int = 0
    ban_unk: bool = False

    def __post_init__(self) -> None:
        check_non_negative_int("max_new_tokens", self.max_new_tokens)
        check_range("temperature", self.temperature, 0)
        check_positive_int("top_k", self.top_k, optional=True)
        check_non_negative_int("seed", self.seed)


def continue_prompts(
    batch: Mapping[str, Any],
    last_logits: Callable[[list[int]], torch.Tensor],
    decode: Callable[[list[int]], str],
    *,
    roles: Mapping[str, int | None],
    window: int | None,
    generation: Generation,
    device: torch.device,
) -> list[dict[str, Any]]:
    """The records of a prompt batch (``index``, ``prompt``, ``input_ids``: :mod:`lightning_embinit.text.prompts`):
    each prompt read after ``eos`` (as a training line is) and continued by :func:`continue_ids`, never choosing
    ``pad`` or ``bos`` (nor ``unk`` with ``ban_unk``), stopping at ``eos``; ``roles``: role → id."""
    eos = roles.get("eos")
    banned = [roles.get(role) for role in ("pad", "bos", *(("unk",) if generation.ban_unk else ()))]
    banned = [i for i in dict.fromkeys(banned) if i is not None and i != eos]
    records = []
    for index, prompt, ids in zip(_indices(batch), batch["prompt"], batch["input_ids"]):
        text = ""
        if not is_blank(prompt):
            generator = torch.Generator(device=device).manual_seed(generation.seed + index)
            context = ([] if eos is None else [eos]) + [int(i) for i in ids]
            new = continue_ids(
                last_logits,
                context,
                generation.max_new_tokens,
                window,
                banned,
                eos,
                generation.temperature,
                generation.top_k,
                generator,
            )
            text = decode(new)
        records.append({"index": index, "prompt": prompt, "continuation": text})
    return records


def _indices(batch: Mapping[str, Any]) -> list[int]:
    index = batch["index"]
    return [int(i) for i in (index.tolist() if isinstance(index, torch.Tensor) else index)]


def batch_indices(batch: Mapping[str, Any], size: int) -> list[int]:
    """The rows of a batch's examples: its ``index`` when it has one, else 0 … ``size`` − 1."""
    return _indices(batch) if isinstance(batch, Mapping) and "index" in batch else list(range(size))


def in_order(records: Sequence[Mapping[str, Any]], size: int) -> list[dict[str, Any]]:
    """``records`` by ``index``; each of the rows 0 … ``size`` − 1 exactly once (else a ValueError: a bug)."""
    ordered = sorted(records, key=lambda record: record["index"])
    if [record["index"] for record in ordered] != list(range(size)):
        raise ValueError(f"prediction records cover rows {[r['index'] for r in ordered][:10]}…, not 0 … {size - 1}")
    return [dict(record) for record in ordered]
