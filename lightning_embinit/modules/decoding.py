"""Batched greedy and beam-search decoding with cached incremental steps (issue 8 §2).

A model decodes through three methods (:class:`IncrementalDecoder`): ``encode(src)`` once per
batch, ``new_cache()`` (a :class:`~lightning_embinit.modules.blocks.DecoderCache`, or None when
the model cannot decode incrementally) and ``next_token_logits(tokens, state, cache)``: with a
cache ``tokens`` holds only the newest token of each row and the keys/values of earlier steps are
read back; without one it holds the whole prefix, recomputed every step (the naive loop).

Beam search follows fairseq: at each step the 2K best continuations of the K live beams are
ranked (``pad`` and ``bos`` are never generated); those ending in ``eos`` among the first K are
finished with score log p / ``|y|^α`` (α = ``length_penalty``, ``|y|`` counting ``eos``; α = 0 ranks by
the raw sum), the K best others live on, and a sentence is done once K hypotheses finished. At
``max_len`` the live beams are finished as they are, so beam size 1 is exactly greedy decoding.
Finished rows leave the batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import torch

from lightning_embinit.checks import check_finite, check_positive_int
from lightning_embinit.modules.blocks import DecoderCache


@dataclass
class EncoderState:
    """What the decoder reads from the source: the encoder output and its padding mask (True = pad),
    plus ``values`` when the model's cross-attention takes values of their own ([R]'s reinforced model)."""

    memory: torch.Tensor
    padding_mask: torch.Tensor
    values: torch.Tensor | None = None

    def select(self, indices: torch.Tensor) -> EncoderState:
        """The rows ``indices`` of every tensor (repeat for beams, drop finished sentences)."""
        tensors = (self.memory, self.padding_mask, self.values)
        return EncoderState(*(None if t is None else t.index_select(0, indices) for t in tensors))


@contextmanager
def eval_mode(module: torch.nn.Module) -> Iterator[None]:
    """``module`` in eval mode (no dropout) inside the block, its training flag restored after."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


class IncrementalDecoder(Protocol):
    bos_id: int
    eos_id: int
    pad_id: int

    def encode(self, src: torch.Tensor) -> EncoderState: ...

    def new_cache(self) -> DecoderCache | None: ...

    def next_token_logits(
        self, tokens: torch.Tensor, state: EncoderState, cache: DecoderCache | None
    ) -> torch.Tensor: ...


def _check(max_len: int, beam_size: int = 1, length_penalty: float = 1.0) -> None:
    check_positive_int("max_len", max_len)
    check_positive_int("beam_size", beam_size)
    check_finite("length_penalty", length_penalty)


def _step(
    model: IncrementalDecoder, prefix: torch.Tensor, state: EncoderState, cache: DecoderCache | None
) -> torch.Tensor:
    """Next-token logits (float32), with ``pad`` and ``bos`` ruled out: neither is ever an output."""
    tokens = prefix[:, -1:] if cache is not None else prefix
    logits = model.next_token_logits(tokens, state, cache).float()
    logits[:, [model.pad_id, model.bos_id]] = float("-inf")
    return logits


@torch.no_grad()
def greedy_decode(
    model: IncrementalDecoder, src: torch.Tensor, *, max_len: int, use_cache: bool = True
) -> torch.Tensor:
    """(B, S) source ids → (B, ≤ max_len) output ids (no ``bos``; ``eos`` then ``pad`` after it)."""
    _check(max_len)
    batch = src.shape[0]
    state = model.encode(src)
    cache = model.new_cache() if use_cache else None
    prefix = torch.full((batch, 1), model.bos_id, dtype=torch.long, device=src.device)
    output = torch.full((batch, max_len), model.pad_id, dtype=torch.long, device=src.device)
    alive = torch.arange(batch, device=src.device)
    steps = 0
    for step in range(max_len):
        token = _step(model, prefix, state, cache).argmax(-1)
        output[alive, step] = token
        steps = step + 1
        running = token != model.eos_id
        if not bool(running.all()):
            keep = running.nonzero().flatten()
            alive, token, prefix, state = alive[keep], token[keep], prefix[keep], state.select(keep)
            if cache is not None:
                cache.reorder_(keep)
            if alive.numel() == 0:
                break
        prefix = torch.cat((prefix, token[:, None]), dim=1)
    return output[:, :steps]


Hypotheses = list[list[tuple[float, list[int]]]]
"""Per sentence: its finished hypotheses as (score, token ids ending in ``eos`` unless cut at max_len)."""


def _finish(hypotheses: list[tuple[float, list[int]]], k: int, log_p: float, tokens: list[int], alpha: float) -> None:
    """Add a finished hypothesis, scored log p / ``|y|^α``, unless its sentence has ``k`` already."""
    if len(hypotheses) < k:
        hypotheses.append((log_p / len(tokens) ** alpha, tokens))


@torch.no_grad()
def beam_search(
    model: IncrementalDecoder,
    src: torch.Tensor,
    *,
    beam_size: int = 4,
    max_len: int,
    length_penalty: float = 1.0,
    use_cache: bool = True,
) -> torch.Tensor:
    """(B, S) source ids → (B, ≤ max_len) ids of each sentence's best hypothesis (module docstring)."""
    _check(max_len, beam_size, length_penalty)
    batch, k, device = src.shape[0], beam_size, src.device
    state = model.encode(src).select(torch.arange(batch, device=device).repeat_interleave(k))
    cache = model.new_cache() if use_cache else None
    prefix = torch.full((batch * k, 1), model.bos_id, dtype=torch.long, device=device)
    scores = torch.full((batch, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start equal: keep one
    finished: Hypotheses = [[] for _ in range(batch)]
    alive = list(range(batch))  # sentence ids of the rows still decoding, in row order
    for step in range(max_len):
        log_probs = _step(model, prefix, state, cache).log_softmax(-1)
        vocab = log_probs.shape[-1]
        candidates = (scores.view(-1, 1) + log_probs).view(len(alive), k * vocab)
        top_scores, top_index = candidates.topk(min(2 * k, k * vocab), dim=1)
        parents, tokens = top_index // vocab, top_index % vocab
        is_eos = tokens == model.eos_id
        for row, rank in (is_eos[:, :k] & (top_scores[:, :k] > float("-inf"))).nonzero().tolist():
            hypothesis = prefix[row * k + parents[row, rank], 1:].tolist() + [model.eos_id]
            _finish(finished[alive[row]], k, top_scores[row, rank].item(), hypothesis, length_penalty)
        scores, position = top_scores.masked_fill(is_eos, float("-inf")).topk(k, dim=1)
        source_rows = (torch.arange(len(alive), device=device)[:, None] * k + parents.gather(1, position)).flatten()
        prefix = torch.cat((prefix[source_rows], tokens.gather(1, position).flatten()[:, None]), dim=1)
        if cache is not None:
            cache.reorder_(source_rows)
        keep_rows = [row for row, sentence in enumerate(alive) if len(finished[sentence]) < k]
        if step == max_len - 1 or not keep_rows:
            break
        if len(keep_rows) < len(alive):  # finished sentences leave the batch
            keep = torch.tensor(keep_rows, device=device)
            flat = (keep[:, None] * k + torch.arange(k, device=device)).flatten()
            alive = [alive[row] for row in keep_rows]
            scores, prefix, state = scores[keep], prefix[flat], state.select(flat)
            if cache is not None:
                cache.reorder_(flat)
    for row, sentence in enumerate(alive):  # at max_len the live beams finish as they are, without eos
        for beam, score in enumerate(scores[row].tolist()):
            if score > float("-inf"):
                _finish(finished[sentence], k, score, prefix[row * k + beam, 1:].tolist(), length_penalty)
    best = [max(hypotheses, key=lambda item: item[0])[1] for hypotheses in finished]  # padded with pad
    output = torch.full((batch, max(map(len, best))), model.pad_id, dtype=torch.long, device=device)
    for sentence, hypothesis in enumerate(best):
        output[sentence, : len(hypothesis)] = torch.tensor(hypothesis, device=device)
    return output
