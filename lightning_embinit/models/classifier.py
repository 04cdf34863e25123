"""An encoder-only transformer classifier for sentences and sentence pairs ([K]'s classification testbed, SPEC §1).

    x = Drop(s · E[t] + P) + S[type]     (:class:`EmbeddingInput`; S only with ``num_segments`` > 0)
    h = Encoder(x)                       (:class:`TransformerStack`: post-LN as [K], or pre-LN; padding masked)
    z = h[:, 0]  (``cls``)   or   Σ_{i not pad} h_i / #{i not pad}  (``mean``)
    logits = W · Drop(z) + b

``cls`` pooling reads the tokenizer's own first token when the inputs start with one (BERT's
``[CLS]``; the ``<cls>``/``[CLS]`` that :class:`~lightning_embinit.data.ClassificationDataModule`
puts first for word-level and WordPiece tokenizers); otherwise the model prepends a learned vector
at position 0 (the tokens then take positions 1 … L). Sentence pairs arrive as one sequence: a
pretrained tokenizer's own layout (``[CLS] a [SEP] b [SEP]``), or ``<cls> a <sep> b`` for word-level
and WordPiece vocabularies; ``token_type_ids`` select a learned segment vector when
``num_segments`` > 0. The model is an :class:`~lightning_embinit.init.EmbeddingHost` with one slot,
``"tokens"``, so ``EmbeddingInitCallback`` and every diagnostic serve it unchanged.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.aggregation import MeanMetric
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from lightning_embinit.data.classification import ClassificationCollator, LabelledDataset
from lightning_embinit.data.text_cache import Ragged
from lightning_embinit.checks import check_choice
from lightning_embinit.init.host import EmbeddingSlot
from lightning_embinit.init.schemes import get_scheme
from lightning_embinit.modules.blocks import TransformerStack
from lightning_embinit.modules.initialization import NON_EMBEDDING_SCHEMES, init_non_embedding_
from lightning_embinit.modules.inputs import EmbeddingInput, fill_token_table_, resolve_scale
from lightning_embinit.models.vocabularies import resolve_tokenizer
from lightning_embinit.models.module import EmbinitModule, check_schedule

POOLINGS = ("cls", "mean")
CLS_SOURCES = ("auto", "tokenizer", "learned")
"""Where ``cls`` pooling's first vector comes from: ``tokenizer`` (the inputs' own first token), ``learned``
(a vector the model prepends) or ``auto`` (the tokenizer's when its inputs start with one, else learned)."""
NO_TOKENIZER_PAD_ID = 0  # the package's special-token order (pad, unk, bos, eos) when no tokenizer is given


def split_classification_batch(batch: Any) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(input_ids, token_type_ids, labels) from a ClassificationDataModule dict, an ``(input_ids, labels)``
    or ``(input_ids, token_type_ids, labels)`` sequence, or bare ``input_ids``."""
    if isinstance(batch, Mapping):
        if "input_ids" not in batch:
            raise ValueError(f"a classification batch needs 'input_ids' (and 'labels'); got keys {sorted(batch)}")
        return batch["input_ids"], batch.get("token_type_ids"), batch.get("labels")
    if isinstance(batch, torch.Tensor):
        return batch, None, None
    if isinstance(batch, Sequence) and 1 <= len(batch) <= 3:
        if len(batch) == 3:
            return batch[0], batch[1], batch[2]
        return batch[0], None, batch[1] if len(batch) == 2 else None
    raise ValueError("a classification batch is a dict with 'input_ids' (and 'labels', 'token_type_ids'), "
                     f"(input_ids, labels), (input_ids, token_type_ids, labels) or input_ids; got {type(batch).__name__}")


def first_special_id(tokenizer: Any) -> int | None:
    """The special token a tokenizer's single-sentence inputs start with (its cls), or None.

    Word-level and WordPiece tokenizers with a ``cls`` role start with it (ClassificationDataModule's
    ``add_cls=True``); a pretrained tokenizer as its post-processor says (BERT: ``[CLS]``, GPT-2: none).
    """
    first, _ = tokenizer.input_template(pair=False, add_cls="cls" in tokenizer.role_ids)[0]
    return first if isinstance(first, int) else None


class TransformerClassifier(EmbinitModule):
    """Encoder-only transformer classifier (module docstring; [K]'s SST-2/MNLI model, SPEC §1).

    Vocabulary: ``tokenizer`` (a :class:`~lightning_embinit.data.tokenization.TextTokenizer` or its
    ``to_config()`` dict, saved in the hyperparameters so a checkpoint classifies new text with its own
    ids) or ``vocab_size`` (pad id 0). Classes: ``label_names`` (saved with the model; ``predict_step``
    and :meth:`classify` return them) or ``num_classes`` (names ``"0"`` … ``"C−1"``).

    Sizes ``d_model``, ``num_heads``, ``num_layers``, ``ffn_dim``; ``pre_norm`` (False: [K]'s post-LN);
    ``input_scale`` (s: ``sqrt_d``, ``inv_sqrt_d``, ``none`` or a number); ``positional``
    (``interleaved``, ``half``, ``learned`` or ``none`` — [K] Table 3 switches P off); ``pooling``
    ``cls`` or ``mean``; ``cls_source`` (:data:`CLS_SOURCES`); ``num_segments``: learned segment
    vectors indexed by ``token_type_ids`` (0 = none; the batches' type ids are then not read and
    word-level pairs are told apart by their separator token). ``init_scheme``: the non-embedding
    weights (SPEC §4: ``xavier`` as [K], ``hf``, ``he_ffn``); ``embedding_init``: the token table until
    ``EmbeddingInitCallback`` replaces it. The learned CLS and segment vectors start at N(0, 0.02²)
    (SPEC §4's embedding convention). Optimizer: Adam(β = ``betas``, ε = ``eps``), ``lr_schedule``
    ``constant`` or ``noam`` (:class:`~lightning_embinit.models.module.EmbinitModule`).

    Logged: ``train_loss`` (per step), ``train_acc`` (per epoch); ``val_loss``, ``val_acc``, ``val_f1``
    (macro F1) and the same for ``test_``; with several validation sets each under its own name,
    ``val_<name>_acc`` … (the datamodule's ``val_dataloader_names``, e.g. MNLI's ``matched`` and
    ``mismatched``; else the loader's index).
    """

    def __init__(
        self,
        tokenizer: dict | None = None,
        vocab_size: int | None = None,
        label_names: list[str] | None = None,
        num_classes: int | None = None,
        d_model: int = 512,
        num_heads: int = 8,
        num_layers: int = 3,
        ffn_dim: int = 2048,
        dropout: float = 0.1,
        attention_dropout: float | None = None,
        activation_dropout: float | None = None,
        max_len: int = 512,
        pre_norm: bool = False,
        activation: str = "relu",
        norm: str = "layernorm",
        positional: str = "interleaved",
        input_scale: str | float = "sqrt_d",
        pooling: str = "cls",
        cls_source: str = "auto",
        num_segments: int = 0,
        init_scheme: str = "xavier",
        embedding_init: str = "xavier",
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.98),
        eps: float = 1e-9,
        weight_decay: float = 0.0,
        lr_schedule: str = "constant",
        warmup_steps: int = 4000,
    ) -> None:
        super().__init__()
        check_choice("pooling", pooling, POOLINGS)
        check_choice("cls_source", cls_source, CLS_SOURCES)
        check_choice("non-embedding init scheme", init_scheme, NON_EMBEDDING_SCHEMES)
        check_schedule(lr_schedule, warmup_steps)
        get_scheme(embedding_init)
        if num_segments < 0:
            raise ValueError(f"num_segments must be ≥ 0 (0: no segment embedding), got {num_segments}")
        self.tokenizer, size = resolve_tokenizer(tokenizer, vocab_size)
        scale = resolve_scale(input_scale, d_model, option="input_scale")
        self.label_names = resolve_label_names(label_names, num_classes)
        # checkpointed, not sent to loggers: the datamodule logs its own (different) tokenizer spec, vocab_size
        # and label_names, and Lightning refuses to merge differing values; a tokenizer config can be megabytes
        self.save_hyperparameters(ignore=["tokenizer", "vocab_size", "label_names"])
        self.hparams["tokenizer"] = None if self.tokenizer is None else self.tokenizer.to_config()
        self.hparams["vocab_size"] = vocab_size
        self.hparams["label_names"] = list(self.label_names)
        self.pad_id = NO_TOKENIZER_PAD_ID if self.tokenizer is None else self.tokenizer.pad_id
        given_first = None if self.tokenizer is None else first_special_id(self.tokenizer)
        if cls_source == "tokenizer" and given_first is None:
            raise ValueError("cls_source='tokenizer' needs a tokenizer whose inputs start with a cls token; "
                             + ("none was given" if self.tokenizer is None else f"this {self.tokenizer.kind} tokenizer's do not")
                             + ": use cls_source='learned' or 'auto'")
        self.adds_cls = given_first is not None  # classify() assembles inputs as ClassificationDataModule(add_cls=True)
        self.cls_id = given_first if pooling == "cls" and cls_source != "learned" else None
        self._first_token_checked = False

        table = nn.Embedding(size, d_model, padding_idx=self.pad_id)
        self.token_input = EmbeddingInput(table, scale=scale, positional=positional, max_len=max_len, dropout=dropout)
        self.cls_vector = nn.Parameter(torch.empty(d_model)) if pooling == "cls" and self.cls_id is None else None
        self.segment_embedding = nn.Embedding(num_segments, d_model) if num_segments else None
        self.encoder = TransformerStack(
            num_layers, d_model, num_heads, ffn_dim, pre_norm=pre_norm, norm=norm, activation=activation,
            dropout=dropout, attention_dropout=attention_dropout, activation_dropout=activation_dropout,
        )
        self.head_dropout = nn.Dropout(dropout)
        self.head = nn.Linear(d_model, len(self.label_names))
        self.train_acc = MulticlassAccuracy(len(self.label_names), average="micro")
        self.eval_metrics = nn.ModuleDict({prefix: self._new_metrics() for prefix in ("val", "test")})
        self._eval_prefixes: list[str] = []
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Non-embedding weights per ``init_scheme`` (SPEC §4); the token table per ``embedding_init``, pad row 0."""
        init_non_embedding_(self, self.hparams.init_scheme)
        for vector in (self.cls_vector, None if self.segment_embedding is None else self.segment_embedding.weight):
            if vector is not None:
                nn.init.normal_(vector, std=0.02)
        fill_token_table_(self.token_input.embedding, self.hparams.embedding_init)

    # ----------------------------------------------------------------- EmbeddingHost
    def embedding_slots(self) -> dict[str, EmbeddingSlot]:
        """One slot, ``"tokens"``: the token table with its strings, pad row, special tokens, input scale and P."""
        tokenizer = self.tokenizer
        return {"tokens": self.token_input.slot(
            "tokens", tokens=None if tokenizer is None else list(tokenizer.tokens), padding_idx=self.pad_id,
            special_tokens={} if tokenizer is None else dict(tokenizer.special_tokens),
        )}

    # ----------------------------------------------------------------- model
    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """(B, L) token ids (and segment ids) → (B, C) class logits."""
        return self.head(self.head_dropout(self.pool(*self.encode(input_ids, token_type_ids))))

    def encode(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, L) ids → the encoder's (B, L′, D) output and its (B, L′) padding mask (True at padding);
        L′ = L + 1 when a learned CLS vector is prepended."""
        padding = input_ids == self.pad_id
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
            x = x + self._segments(torch.zeros_like(padding, dtype=torch.long) if token_type_ids is None else token_type_ids)
        return self.encoder(x, padding_mask=padding), padding

    def pool(self, hidden: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        """(B, L, D) → (B, D): the first position (``cls``) or the mean over non-padding positions (``mean``)."""
        if self.hparams.pooling == "cls":
            return hidden[:, 0]
        keep = (~padding).unsqueeze(-1).to(hidden.dtype)
        return (hidden * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1)

    def _segments(self, token_type_ids: torch.Tensor) -> torch.Tensor:
        try:
            return self.segment_embedding(token_type_ids)
        except IndexError:
            raise ValueError(
                f"token_type_ids must be in 0 … {self.hparams.num_segments - 1} (num_segments="
                f"{self.hparams.num_segments}); got the values {torch.unique(token_type_ids).tolist()}"
            ) from None

    def _check_first_token(self, input_ids: torch.Tensor) -> None:
        """Once per model: ``cls`` pooling of a tokenizer-given token needs every input to start with it."""
        if input_ids.numel():
            wrong = input_ids[:, 0] != self.cls_id
            if bool(wrong.any()):
                token = self.tokenizer.tokens[self.cls_id]
                raise ValueError(
                    f"cls pooling reads the tokenizer's first token {token!r} (id {self.cls_id}), but {int(wrong.sum())} "
                    f"of {input_ids.shape[0]} inputs start with another id (e.g. {int(input_ids[wrong][0, 0])}): build the "
                    "inputs with ClassificationDataModule(add_cls=True) (its default), or the model with "
                    "cls_source='learned' (a CLS vector the model prepends)"
                )
        self._first_token_checked = True

    # ----------------------------------------------------------------- Lightning steps
    def _logits(self, batch: Any, what: str) -> tuple[torch.Tensor, torch.Tensor]:
        input_ids, token_type_ids, labels = split_classification_batch(batch)
        if labels is None:
            raise ValueError(f"{what} batches need 'labels'")
        return self(input_ids, token_type_ids), labels

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        logits, labels = self._logits(batch, "training")
        loss = F.cross_entropy(logits, labels)
        self.train_acc.update(logits.detach().argmax(dim=-1), labels)
        batch_size = labels.shape[0]
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=False, batch_size=batch_size)
        self.log("train_acc", self.train_acc, on_step=False, on_epoch=True, batch_size=batch_size)
        return loss

    def on_validation_epoch_start(self) -> None:
        super().on_validation_epoch_start()
        self._eval_prefixes = self._prefixes("val", len(self.trainer.num_val_batches), "val_dataloader_names")

    def on_test_epoch_start(self) -> None:
        super().on_test_epoch_start()
        self._eval_prefixes = self._prefixes("test", len(self.trainer.num_test_batches), "test_dataloader_names")

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self._evaluate(batch, dataloader_idx)

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self._evaluate(batch, dataloader_idx)

    def _evaluate(self, batch: Any, dataloader_idx: int) -> torch.Tensor:
        prefix = self._eval_prefixes[dataloader_idx]
        metrics = self._metrics(prefix)
        logits, labels = self._logits(batch, prefix)
        loss = F.cross_entropy(logits, labels)
        predictions = logits.argmax(dim=-1)
        batch_size = labels.shape[0]
        metrics["loss"].update(loss.detach(), weight=batch_size)
        metrics["acc"].update(predictions, labels)
        metrics["f1"].update(predictions, labels)
        for name, metric in metrics.items():
            self.log(f"{prefix}_{name}", metric, on_step=False, on_epoch=True, batch_size=batch_size,
                     prog_bar=prefix.startswith("val") and name == "acc", add_dataloader_idx=False,
                     metric_attribute=f"eval_metrics.{prefix}.{name}")
        return loss

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> list[str]:
        """The predicted label name of every example in the batch (batch order; ClassificationDataModule
        batches carry each example's row in ``index``)."""
        input_ids, token_type_ids, _ = split_classification_batch(batch)
        return [self.label_names[k] for k in self(input_ids, token_type_ids).argmax(dim=-1).tolist()]

    # ----------------------------------------------------------------- metrics by evaluation set
    def _new_metrics(self) -> nn.ModuleDict:
        classes = len(self.label_names)
        return nn.ModuleDict({"loss": MeanMetric(), "acc": MulticlassAccuracy(classes, average="micro"),
                              "f1": MulticlassF1Score(classes, average="macro")})

    def _prefixes(self, stage: str, count: int, names_attribute: str) -> list[str]:
        """``stage`` for one loader; ``<stage>_<name>`` for several (the datamodule's names, else the index)."""
        if count <= 1:
            return [stage]
        names = getattr(self.trainer.datamodule, names_attribute, None)
        names = list(names) if names is not None and len(names) == count else [str(k) for k in range(count)]
        return [f"{stage}_{str(name).replace('.', '_')}" for name in names]

    def _metrics(self, prefix: str) -> nn.ModuleDict:
        """The metrics of one evaluation set, made at its first batch for sets beyond ``val``/``test``."""
        if prefix not in self.eval_metrics:
            with torch.inference_mode(False):  # normal tensors: a later fit updates them in place
                self.eval_metrics[prefix] = self._new_metrics().to(self.device)
        return self.eval_metrics[prefix]

    # ----------------------------------------------------------------- new text
    @torch.no_grad()
    def classify(self, texts: Sequence[str], pairs: Sequence[str] | None = None, *, batch_size: int = 64) -> list[str]:
        """Label names for raw sentences (or sentence pairs) with the model's own tokenizer (evaluation mode).

        Inputs are assembled as ClassificationDataModule does (its default ``add_cls=True``), truncated
        longest-first to ``max_len``.
        """
        tokenizer = self.tokenizer
        if tokenizer is None:
            raise ValueError("classify() needs the model's tokenizer (give tokenizer= at construction)")
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(pairs)} pair texts")
        texts = list(texts)
        first = Ragged.from_lists(tokenizer.encode_batch(texts))
        second = None if pairs is None else Ragged.from_lists(tokenizer.encode_batch(list(pairs)))
        template = tokenizer.input_template(pair=second is not None, add_cls=self.adds_cls)
        limit = self.hparams.max_len - (self.cls_vector is not None)
        rows = np.arange(len(texts))
        data = LabelledDataset(first, second, np.zeros(len(texts), dtype=np.int64), texts,
                               None if pairs is None else list(pairs), template, limit, rows)
        collate = ClassificationCollator(tokenizer.pad_id, second is not None)
        order = np.argsort(-data.lengths, kind="stable")
        results: list[str] = [""] * len(texts)
        was_training = self.training
        self.eval()
        try:
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size].tolist()
                batch = collate([data[i] for i in chunk])
                types = batch.get("token_type_ids")
                logits = self(batch["input_ids"].to(self.device), None if types is None else types.to(self.device))
                for i, k in zip(chunk, logits.argmax(dim=-1).tolist()):
                    results[i] = self.label_names[k]
        finally:
            self.train(was_training)
        return results


def resolve_label_names(label_names: Sequence[str] | None, num_classes: int | None) -> list[str]:
    """The class names by label id: ``label_names`` (≥ 2, distinct), or ``"0"`` … ``"C−1"`` for ``num_classes``."""
    if label_names is None:
        if num_classes is None or num_classes < 2:
            raise ValueError(f"give label_names (the CLI links the datamodule's) or num_classes ≥ 2; got num_classes={num_classes}")
        return [str(k) for k in range(num_classes)]
    names = [str(name) for name in label_names]
    if len(names) < 2 or len(set(names)) != len(names):
        raise ValueError(f"label_names must be ≥ 2 distinct names, got {names}")
    if num_classes is not None and num_classes != len(names):
        raise ValueError(f"num_classes={num_classes} disagrees with {len(names)} label_names {names}")
    return names
