"""An encoder-only transformer classifier for sentences and sentence pairs ([K]'s classification testbed,
docs/concepts.md#kim-classifier), a plain ``nn.Module``:

    x = Drop(s · E[t] + P) + S[type]     (:class:`EmbeddingInput`; S only with ``num_segments`` > 0)
    h = Encoder(x)                       (:class:`TransformerStack`: post-LN as [K], or pre-LN; padding masked)
    z = h[:, 0]  (``cls``)   or   Σ_{i not pad} h_i / #{i not pad}  (``mean``)
    logits = W · Drop(z) + b

``cls`` pooling reads the inputs' own first token when they start with one (``first_token_id``: BERT's
``[CLS]``, or the ``<cls>`` that :class:`~lightning_embinit.data.ClassificationDataModule` puts first);
otherwise the model prepends a learned vector at position 0 (the tokens then take positions 1 … L).
``token_type_ids`` select a learned segment vector when ``num_segments`` > 0. One slot, ``"tokens"``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from lightning_embinit.architectures.config import EncoderClassifierConfig
from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.modules.initialization import init_non_embedding_
from lightning_embinit.modules.inputs import EmbeddingInput, fill_token_table_
from lightning_embinit.vocabulary import Vocabulary, VocabularyLike


class EncoderClassifier(nn.Module):
    """Encoder-only transformer classifier (module docstring; :class:`EncoderClassifierConfig`) over ``vocab``
    (its ``pad`` id, when it has one, is masked) into ``num_classes`` classes.

    ``first_token_id``: the id every input starts with (a tokenizer's cls), which ``cls`` pooling reads unless
    ``cls_source="learned"``; without one (or with ``learned``) a learned CLS vector is prepended. The learned
    CLS and segment vectors start at N(0, 0.02²) ([A]'s embedding convention).
    """

    def __init__(
        self,
        config: EncoderClassifierConfig,
        vocab: VocabularyLike,
        num_classes: int,
        *,
        first_token_id: int | None = None,
    ) -> None:
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"num_classes must be ≥ 2, got {num_classes}")
        if config.cls_source == "tokenizer" and first_token_id is None:
            raise ValueError(
                "cls_source='tokenizer' needs first_token_id (the id every input starts with): "
                "use cls_source='learned' or 'auto'"
            )
        self.config = config
        self.vocab = Vocabulary.of(vocab)
        self.pad_id = self.vocab.pad_id
        self.cls_id = first_token_id if config.pooling == "cls" and config.cls_source != "learned" else None
        self._first_token_checked = False
        d = config.d_model
        table = nn.Embedding(self.vocab.size, d, padding_idx=self.pad_id)
        self.token_input = EmbeddingInput(
            table,
            scale=config.input_scale,
            positional=config.positional,
            max_len=config.max_len,
            dropout=config.dropout,
            scale_option="input_scale",
        )
        self.cls_vector = nn.Parameter(torch.empty(d)) if config.pooling == "cls" and self.cls_id is None else None
        self.segment_embedding = nn.Embedding(config.num_segments, d) if config.num_segments else None
        self.encoder = config.stack(config.num_layers, pre_norm=config.pre_norm)
        self.head_dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(d, num_classes)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Non-embedding weights per ``init_scheme`` ([A], [K]); the token table per ``embedding_init``, pad row 0."""
        init_non_embedding_(self, self.config.init_scheme)
        for vector in (self.cls_vector, None if self.segment_embedding is None else self.segment_embedding.weight):
            if vector is not None:
                nn.init.normal_(vector, std=0.02)
        fill_token_table_(self.token_input.embedding, self.config.embedding_init)

    def embedding_slots(self) -> dict[str, EmbeddingSlot]:
        """One slot, ``"tokens"``: the token table with its strings, pad row, special tokens, input scale and P."""
        return {"tokens": self.token_input.slot("tokens", **self.vocab.slot_arguments())}

    def vocabulary_outputs(self) -> dict[str, tuple[str, ...]]:
        """No output layer follows the vocabulary (the head predicts classes)."""
        return {}

    def remap_vocabulary(self, slot: str, vocab: Vocabulary, new_id: Callable[[int | None], int | None]) -> None:
        """Follow a vocabulary extension (the table was rewritten): the vocabulary, pad id and cls id."""
        self.vocab = vocab
        self.pad_id = vocab.pad_id
        self.cls_id = new_id(self.cls_id)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(B, L) token ids (and segment ids) → (B, C) class logits."""
        return self.head(self.head_dropout(self.pool(*self.encode(input_ids, token_type_ids))))

    def encode(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, L) ids → the encoder's (B, L′, D) output and its (B, L′) padding mask (True at padding);
        L′ = L + 1 when a learned CLS vector is prepended."""
        padding = input_ids == self.pad_id if self.pad_id is not None else torch.zeros_like(input_ids, dtype=torch.bool)
        if self.cls_id is not None and not self._first_token_checked:
            self._check_first_token(input_ids)
        x = self.token_input(input_ids, offset=0 if self.cls_vector is None else 1)
        if self.cls_vector is not None:
            first = self.cls_vector
            if self.token_input.positional is not None:
                first = first + self.token_input.positional(1)[0]
            first = self.token_input.dropout(first.to(x.dtype).expand(x.shape[0], 1, -1))
            x = torch.cat((first, x), dim=1)
            padding = F.pad(padding, (1, 0), value=False)
            token_type_ids = None if token_type_ids is None else F.pad(token_type_ids, (1, 0), value=0)
        if self.segment_embedding is not None:
            x = x + self._segments(
                torch.zeros_like(padding, dtype=torch.long) if token_type_ids is None else token_type_ids
            )
        return self.encoder(x, padding_mask=padding), padding

    def pool(self, hidden: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        """(B, L, D) → (B, D): the first position (``cls``) or the mean over non-padding positions (``mean``)."""
        if self.config.pooling == "cls":
            return hidden[:, 0]
        keep = (~padding).unsqueeze(-1).to(hidden.dtype)
        return (hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1)

    def _segments(self, token_type_ids: torch.Tensor) -> torch.Tensor:
        try:
            return self.segment_embedding(token_type_ids)
        except IndexError:
            raise ValueError(
                f"token_type_ids must be in 0 … {self.config.num_segments - 1} (num_segments="
                f"{self.config.num_segments}); got the values {torch.unique(token_type_ids).tolist()}"
            ) from None

    def _check_first_token(self, input_ids: torch.Tensor) -> None:
        """Once per model: ``cls`` pooling of a tokenizer-given token needs every input to start with it."""
        if input_ids.numel():
            wrong = input_ids[:, 0] != self.cls_id
            if bool(wrong.any()):
                token = self.vocab.tokens[self.cls_id] if self.vocab.tokens is not None else f"<id {self.cls_id}>"
                raise ValueError(
                    f"cls pooling reads the tokenizer's first token {token!r} (id {self.cls_id}), "
                    f"but {int(wrong.sum())} of {input_ids.shape[0]} inputs start with another id "
                    f"(e.g. {int(input_ids[wrong][0, 0])}): build the "
                    "inputs with ClassificationDataModule(add_cls=True) (its default), or the model with "
                    "cls_source='learned' (a CLS vector the model prepends)"
                )
        self._first_token_checked = True
