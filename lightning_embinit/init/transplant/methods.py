"""Step 2 of a transplant: the rows of the new tokens no match found, each a weighted sum of **old** rows
(docs/transplant.md, "Methods"). A method answers each pending token with (old ids, weights), ``MEAN`` (μ, the mean
of the old rows) or None (it cannot: the fallback method answers). The same weights build the token table's row,
every untied output layer's row and the biases' entries.

- ``mean``: μ (Hewitt 2021: no new token outweighs the average old one);
- ``pieces``: FVT (Gee et al., "Fast Vocabulary Transfer for Language Model Compression", 2022): the mean of the old
  rows of the pieces the **old** tokenizer splits the new token's text into;
- ``description``: the mean of the old pieces of a text the user gives for the token (``<svg>`` → "scalable
  vector graphics");
- ``token:<old token>``: that old token's row;
- ``focus``: FOCUS (Dobler & de Melo, "FOCUS: Effective Embedding Initialization for Monolingual Specialization of
  Multilingual Models", EMNLP 2023): Σ_j w_j·e_j over the matched (anchor) tokens j, w = sparsemax of the cosine
  similarities between the token and the anchors in an auxiliary fastText space of the target domain;
- ``neighbors[:k]``: Shepard's inverse-distance weighting ("A two-dimensional interpolation function for
  irregularly-spaced data", 1968) of the k nearest anchors (default 16) to the token's row in a **donor** model that
  already speaks the new tokenizer: w_j ∝ 1/‖x_t − x_j‖, the new row Σ_j w_j·e_j (mergekit's tokensurgeon calls it
  common interpolation);
- ``omp[:k]``: orthogonal matching pursuit (as mergekit's tokensurgeon): the token's row in a **donor** model that
  already speaks the new tokenizer, x ≈ Σ_{j∈S} c_j·x_j over at most k anchors (default 64); its row in the trained
  model is Σ_{j∈S} c_j·e_j. An untied output layer's rows are fitted apart, in the donor's output layer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import torch

from lightning_embinit.init.registry import Registry
from lightning_embinit.init.transplant.spaces import StaticSpace
from lightning_embinit.init.transplant.sparse import orthogonal_matching_pursuit, sparsemax

MEAN = "mean"
"""A method's answer for a token whose row is μ."""
Answer = tuple[Sequence[int], Sequence[float]] | str | None


@dataclass
class MethodRequest:
    """What a method reads: the new tokens and the pending ids, the anchors (matched new id → old id, special tokens
    left out), the texts of tokens for the old tokenizer (``text_of``) and the old tokenizer itself (``split``: texts
    → old ids), the user's ``descriptions``, and the donor and auxiliary spaces (built on first use)."""

    new_tokens: Sequence[str]
    old_tokens: Sequence[str]
    pending: list[int]
    anchors: dict[int, int]
    text_of: Callable[[str], str]
    split: Callable[[Sequence[str]], list[list[int]]] | None = None
    descriptions: Mapping[str, str] = field(default_factory=dict)
    donor: Callable[[str], StaticSpace] | None = None
    auxiliary: Callable[[], StaticSpace] | None = None
    role: str = "input"
    leading_space: bool = False
    """Whether a text's first word needs a leading space to split into word-start pieces (a byte-level tokenizer)."""

    @cached_property
    def donor_space(self) -> StaticSpace:
        """The donor's rows for this request's ``role``: its input table, or its output layer's rows."""
        if self.donor is None:
            raise ValueError(
                "methods 'omp' and 'neighbors' need donor=: a model that already speaks the new tokenizer (a "
                "Hugging Face model directory, a module or a table by new id)"
            )
        return self.donor(self.role)

    @cached_property
    def auxiliary_space(self) -> StaticSpace:
        if self.auxiliary is None:
            raise ValueError(
                "method 'focus' needs target-domain text (texts=: lines of the new domain, tokenized by the new "
                "tokenizer to train fastText) or auxiliary= vectors over the new tokens"
            )
        return self.auxiliary()

    def old_pieces(self, texts: Sequence[str], what: str) -> list[list[int]]:
        if self.split is None:
            raise ValueError(
                f"method {what!r} splits text with the old tokenizer; pass old_tokenizer= (the model's own tokenizer: "
                "a Hugging Face tokenizer or directory, or the package's tokenizer), not a token list"
            )
        return self.split(texts)


@dataclass(frozen=True)
class TransplantMethod:
    """A named way to answer the pending tokens (module doc)."""

    name: str
    answer: Callable[[MethodRequest, list[int]], list[Answer]]
    per_role: bool = False
    """Whether an untied output layer's rows are answered apart (``role="output"``: the donor's output space)."""

    def __call__(self, request: MethodRequest, ids: list[int]) -> list[Answer]:
        return self.answer(request, ids)


METHODS: Registry[TransplantMethod] = Registry("transplant method")
"""Transplant methods by the names users type: ``mean``, ``pieces``, ``description``, ``token:<old token>``,
``focus``, ``neighbors[:k]``, ``omp[:k]``."""


def _uniform(pieces: Sequence[int]) -> Answer:
    return (list(pieces), [1.0 / len(pieces)] * len(pieces)) if pieces else None


@METHODS.register("mean", summary="μ, the mean of the old rows (Hewitt 2021)")
def mean_method() -> TransplantMethod:
    return TransplantMethod("mean", lambda request, ids: [MEAN] * len(ids))


@METHODS.register("pieces", summary="FVT: the mean of the old rows of the old tokenizer's pieces of the token's text")
def pieces_method() -> TransplantMethod:
    def answer(request: MethodRequest, ids: list[int]) -> list[Answer]:
        texts = [request.text_of(request.new_tokens[i]) for i in ids]
        return [_uniform(pieces) for pieces in request.old_pieces(texts, "pieces")]

    return TransplantMethod("pieces", answer)


@METHODS.register("description", summary="the mean of the old pieces of a text given per token (descriptions=)")
def description_method() -> TransplantMethod:
    def answer(request: MethodRequest, ids: list[int]) -> list[Answer]:
        if not request.descriptions:
            raise ValueError(
                "method 'description' needs descriptions= (new token → a text, e.g. {'<svg>': 'scalable vector "
                "graphics'}; on the command line --descriptions FILE, token<TAB>text per line)"
            )
        described = [i for i in ids if request.new_tokens[i] in request.descriptions]
        space = " " if request.leading_space else ""
        texts = [space + request.descriptions[request.new_tokens[i]].strip() for i in described]
        found = dict(zip(described, request.old_pieces(texts, "description"))) if described else {}
        return [_uniform(found[i]) if i in found else None for i in ids]

    return TransplantMethod("description", answer)


@METHODS.register("token", takes_argument=True, summary="the row of the named old token (token:<old token>)")
def token_method(old_token: str) -> TransplantMethod:
    def answer(request: MethodRequest, ids: list[int]) -> list[Answer]:
        if old_token not in request.old_tokens:
            raise ValueError(
                f"method 'token:{old_token}': the old vocabulary has no token {old_token!r} "
                f"(its first tokens: {list(request.old_tokens[:8])})"
            )
        row = list(request.old_tokens).index(old_token)
        return [([row], [1.0])] * len(ids)

    return TransplantMethod(f"token:{old_token}", answer)


def _block_rows(anchors: int) -> int:
    """Tokens per block of a token × anchor matrix of about 2²² entries (32 MiB in float64)."""
    return max(1, min(1024, 2**22 // max(anchors, 1)))


def _anchor_rows(request: MethodRequest, space: StaticSpace, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(new ids, old ids) of the anchors the space has a row for; an error when there are none."""
    anchors = [(new, old) for new, old in request.anchors.items() if bool(space.present[new])]
    if not anchors:
        raise ValueError(
            f"method {what!r}: no matched token has a row in {space.description}, so there is nothing to combine; "
            "does the space speak the new tokenizer?"
        )
    new_ids, old_ids = zip(*anchors)
    return torch.tensor(new_ids), torch.tensor(old_ids)


def _sparse_answers(
    ids: list[int], served: list[int], old_ids: torch.Tensor, columns: torch.Tensor, weights: torch.Tensor
) -> list[Answer]:
    """Per pending id: (old ids, weights) of its nonzero weights (rows of ``columns``/``weights`` by ``served``)."""
    answers: dict[int, Answer] = {}
    for row, token in enumerate(served):
        keep = weights[row] != 0
        if bool(keep.any()):
            answers[token] = (old_ids[columns[row][keep]].tolist(), weights[row][keep].tolist())
    return [answers.get(i) for i in ids]


def _by_blocks(
    ids: list[int],
    space: StaticSpace,
    anchors: tuple[int, torch.Tensor],
    weigh: Callable[[list[int]], tuple[torch.Tensor, torch.Tensor]],
) -> list[Answer]:
    """Per pending id, the answer of ``weigh`` (a block of the ids ``space`` has a row for → each one's (anchor
    columns, weights)), over blocks of :func:`_block_rows` tokens; ``anchors``: (how many, their old ids)."""
    count, anchor_old = anchors
    served = [i for i in ids if bool(space.present[i])]
    answers: list[Answer] = []
    step = _block_rows(count)
    for start in range(0, len(served), step):
        block = served[start : start + step]
        answers += _sparse_answers(block, block, anchor_old, *weigh(block))
    found = dict(zip(served, answers))
    return [found.get(i) for i in ids]


@METHODS.register("focus", summary="FOCUS: sparsemax-weighted anchors by similarity in fastText on target text")
def focus_method() -> TransplantMethod:
    def answer(request: MethodRequest, ids: list[int]) -> list[Answer]:
        space = request.auxiliary_space
        anchor_new, anchor_old = _anchor_rows(request, space, "focus")
        anchors = torch.nn.functional.normalize(space.rows[anchor_new].double(), dim=1)

        def weigh(block: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
            queries = torch.nn.functional.normalize(space.rows[block].double(), dim=1)
            columns = torch.arange(anchors.shape[0]).expand(len(block), -1)
            return columns, sparsemax(queries @ anchors.T)

        return _by_blocks(ids, space, (anchors.shape[0], anchor_old), weigh)

    return TransplantMethod("focus", answer)


def _count(value: str | int, method: str) -> int:
    try:
        k = int(value)
    except ValueError:
        raise ValueError(f"method '{method}:<k>' takes a whole number of anchors per token; got {value!r}") from None
    if k < 1:
        raise ValueError(f"method '{method}:<k>': k must be ≥ 1, got {k}")
    return k


@METHODS.register("neighbors", summary="inverse-distance weights of the k nearest anchors in a donor's space (16)")
def neighbors_method(count: str | int = 16) -> TransplantMethod:
    k = _count(count, "neighbors")

    def answer(request: MethodRequest, ids: list[int]) -> list[Answer]:
        space = request.donor_space
        anchor_new, anchor_old = _anchor_rows(request, space, "neighbors")
        anchors = space.rows[anchor_new].float()

        def weigh(block: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
            distances = torch.cdist(space.rows[block].float(), anchors)
            near, columns = distances.topk(min(k, anchors.shape[0]), dim=1, largest=False)
            weights = 1.0 / near.double().clamp(min=1e-12)
            return columns, weights / weights.sum(dim=1, keepdim=True)

        return _by_blocks(ids, space, (anchors.shape[0], anchor_old), weigh)

    return TransplantMethod("neighbors" if k == 16 else f"neighbors:{k}", answer, per_role=True)


@METHODS.register("omp", summary="orthogonal matching pursuit over anchors in a donor's space (omp:<k>: k anchors)")
def omp_method(atoms: str | int = 64) -> TransplantMethod:
    k = _count(atoms, "omp")

    def answer(request: MethodRequest, ids: list[int]) -> list[Answer]:
        space = request.donor_space
        anchor_new, anchor_old = _anchor_rows(request, space, "omp")
        served = [i for i in ids if bool(space.present[i])]
        columns, weights = orthogonal_matching_pursuit(space.rows[served], space.rows[anchor_new], k)
        return _sparse_answers(ids, served, anchor_old, columns, weights)

    return TransplantMethod("omp" if k == 64 else f"omp:{k}", answer, per_role=True)


def resolve_method(spec: str | TransplantMethod) -> TransplantMethod:
    """The method ``spec`` names (``omp:<k>``, ``neighbors:<k>``: k anchors per token; 64 and 16 without)."""
    if isinstance(spec, TransplantMethod):
        return spec
    if isinstance(spec, str) and spec.partition(":")[0] in ("omp", "neighbors") and ":" in spec:
        name, _, count = spec.partition(":")
        return (omp_method if name == "omp" else neighbors_method)(count)
    return METHODS.build(spec)
