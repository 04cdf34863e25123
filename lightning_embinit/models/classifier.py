"""[K]'s classification testbed (docs/concepts.md#kim-testbed) as a Lightning system: the encoder-only architecture
:class:`~lightning_embinit.architectures.EncoderClassifier` with its tokenizer, label names, losses, accuracy and
macro F1 per evaluation set, and :meth:`TransformerClassifier.classify` for new text. Sentence pairs arrive as one
sequence (:class:`~lightning_embinit.data.ClassificationDataModule`); ``cls`` pooling reads the tokenizer's first
token when its inputs start with one, else a learned vector.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.aggregation import MeanMetric
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score
from typing_extensions import override

from lightning_embinit.architectures.classifier import EncoderClassifier
from lightning_embinit.architectures.config import EncoderClassifierConfig
from lightning_embinit.checks import check_positive_int, check_texts
from lightning_embinit.models.module import EmbinitModule, resolve_tokenizer, saved_tokenizer
from lightning_embinit.models.optimization import OptimizerConfig
from lightning_embinit.models.prediction import batch_indices, in_order, is_blank
from lightning_embinit.modules.decoding import eval_mode
from lightning_embinit.text.batches import ClassificationCollator, LabelledDataset, Ragged
from lightning_embinit.vocabulary import Vocabulary

NO_TOKENIZER_PAD_ID = 0  # the package's special-token order (pad, unk, bos, eos) when no tokenizer is given


def split_classification_batch(batch: Any) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(input_ids, token_type_ids, labels) from a dict, an ``(input_ids[, token_type_ids], labels)`` sequence, or
    bare ``input_ids``."""
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
    raise ValueError(
        "a classification batch is a dict with 'input_ids' (and 'labels', 'token_type_ids'), "
        f"(input_ids, labels), (input_ids, token_type_ids, labels) or input_ids; got {type(batch).__name__}"
    )


def first_special_id(tokenizer: Any) -> int | None:
    """The special token a tokenizer's single-sentence inputs start with, or None: the ``cls`` role of a word-level or
    WordPiece tokenizer (``add_cls=True``); a pretrained tokenizer's as its post-processor says (BERT: ``[CLS]``)."""
    first, _ = tokenizer.input_template(pair=False, add_cls="cls" in tokenizer.role_ids)[0]
    return first if isinstance(first, int) else None


class TransformerClassifier(EmbinitModule):
    """Encoder-only transformer classifier (module docstring; Kim et al.'s SST-2/MNLI model [K]).

    Vocabulary: ``tokenizer`` (a :class:`~lightning_embinit.text.tokenization.TextTokenizer` or its ``to_config()``
    dict, saved in the hyperparameters) or ``vocab_size`` (pad id 0). Classes: ``label_names`` (saved; what
    ``predict_step`` and :meth:`classify` return) or ``num_classes`` (names ``"0"`` … ``"C−1"``). ``architecture``:
    :class:`~lightning_embinit.architectures.EncoderClassifierConfig` ([K] Table 3 switches ``positional`` off);
    ``optimizer``: :class:`~lightning_embinit.models.optimization.OptimizerConfig` (Adam at 1e-4, [K]).

    Logged: ``train_loss`` (per step), ``train_acc`` (per epoch); ``val_loss``, ``val_acc``, ``val_f1`` (macro F1)
    and the same for ``test_``; several validation sets log ``val_<name>_acc`` … (the datamodule's
    ``val_dataloader_names``, e.g. MNLI's ``matched`` and ``mismatched``; else the loader's index).
    """

    architecture_config = EncoderClassifierConfig
    model: EncoderClassifier

    def __init__(
        self,
        tokenizer: dict | None = None,
        vocab_size: int | None = None,
        label_names: list[str] | None = None,
        num_classes: int | None = None,
        *,
        architecture: EncoderClassifierConfig = EncoderClassifierConfig(),
        optimizer: OptimizerConfig = OptimizerConfig(lr=1e-4),
    ) -> None:
        super().__init__()
        config = self._configure(architecture, optimizer, own={"num_classes": num_classes})
        tokenizer, size = resolve_tokenizer(tokenizer, vocab_size)
        self._set_tokenizer("tokenizer", tokenizer)
        self.label_names = resolve_label_names(label_names, num_classes)
        # checkpointed, not sent to loggers: the datamodule logs its own (different) vocab_size and label_names,
        # and Lightning refuses to merge differing values
        self.hparams["vocab_size"] = vocab_size
        self.hparams["label_names"] = list(self.label_names)
        given_first = None if self.tokenizer is None else first_special_id(self.tokenizer)
        if config.cls_source == "tokenizer" and given_first is None:
            raise ValueError(
                "cls_source='tokenizer' needs a tokenizer whose inputs start with a cls token; "
                + ("none was given" if self.tokenizer is None else f"this {self.tokenizer.kind} tokenizer's do not")
                + ": use cls_source='learned' or 'auto'"
            )
        self.adds_cls = given_first is not None  # classify() assembles inputs as ClassificationDataModule(add_cls=True)
        vocab = (
            Vocabulary.sized(size, special_ids={"pad": NO_TOKENIZER_PAD_ID})
            if self.tokenizer is None
            else self.tokenizer.vocabulary
        )
        self.model = EncoderClassifier(config, vocab, len(self.label_names), first_token_id=given_first)
        self.train_acc = MulticlassAccuracy(len(self.label_names), average="micro")
        self.eval_metrics = nn.ModuleDict({prefix: self._new_metrics() for prefix in ("val", "test")})
        self._eval_prefixes: list[str] = []

    @override
    def _follow_vocabulary(self, change: Any, vocab: Vocabulary) -> Callable[[], None]:
        return self._follow_tokenizers(change, ("tokenizer",))

    @override
    @classmethod
    def checkpoint_vocabularies(cls, hparams: Mapping[str, Any]) -> dict[str, tuple[list[str] | None, Any]]:
        return {"tokens": saved_tokenizer(hparams.get("tokenizer"))}

    # ----------------------------------------------------------------- Lightning steps
    def _logits(self, batch: Any, what: str) -> tuple[torch.Tensor, torch.Tensor]:
        input_ids, token_type_ids, labels = split_classification_batch(batch)
        if labels is None:
            raise ValueError(f"{what} batches need 'labels'")
        return self(input_ids, token_type_ids), labels

    @override
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        logits, labels = self._logits(batch, "training")
        loss = F.cross_entropy(logits, labels)
        self.train_acc.update(logits.detach().argmax(dim=-1), labels)
        batch_size = labels.shape[0]
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=False, batch_size=batch_size)
        self.log("train_acc", self.train_acc, on_step=False, on_epoch=True, batch_size=batch_size)
        return loss

    @override
    def on_validation_epoch_start(self) -> None:
        super().on_validation_epoch_start()
        self._eval_prefixes = self._prefixes("val", len(self.trainer.num_val_batches), "val_dataloader_names")

    @override
    def on_test_epoch_start(self) -> None:
        super().on_test_epoch_start()
        self._eval_prefixes = self._prefixes("test", len(self.trainer.num_test_batches), "test_dataloader_names")

    @override
    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
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
            self.log(
                f"{prefix}_{name}",
                metric,
                on_step=False,
                on_epoch=True,
                batch_size=batch_size,
                prog_bar=prefix.startswith("val") and name == "acc",
                add_dataloader_idx=False,
                metric_attribute=f"eval_metrics.{prefix}.{name}",
            )
        return loss

    test_step = validation_step

    @override
    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> list[dict[str, Any]]:
        """The batch's predictions as records (:meth:`classify_batch`)."""
        return self.classify_batch(batch)

    @torch.no_grad()
    def classify_batch(self, batch: Any) -> list[dict[str, Any]]:
        """Records of a batch (a ClassificationDataModule dict, a sequence or bare ``input_ids``): each row's
        ``index`` (the batch's, else its position), ``text`` (and ``text_pair``; None when the batch has none),
        ``label`` (the most probable class's name) and ``probabilities`` (class name → probability). A row whose
        texts are all blank is not run: its label and probabilities are None (evaluation mode)."""
        input_ids, token_type_ids, _ = split_classification_batch(batch)
        size = input_ids.shape[0]
        given = batch if isinstance(batch, Mapping) else {}
        texts = list(given.get("text") or [None] * size)
        pairs = given.get("text_pair")
        run = [row for row in range(size) if not (is_blank(texts[row]) and (pairs is None or is_blank(pairs[row])))]
        probabilities: list[list[float] | None] = [None] * size
        if run:
            with eval_mode(self):
                logits = self(input_ids[run], None if token_type_ids is None else token_type_ids[run])
            for row, values in zip(run, logits.float().softmax(dim=-1).tolist()):
                probabilities[row] = values
        records = []
        for row, index in enumerate(batch_indices(batch, size)):
            record: dict[str, Any] = {"index": index, "text": texts[row]}
            if pairs is not None:
                record["text_pair"] = pairs[row]
            values = probabilities[row]
            record["label"] = None if values is None else self.label_names[values.index(max(values))]
            record["probabilities"] = None if values is None else dict(zip(self.label_names, values))
            records.append(record)
        return records

    # ----------------------------------------------------------------- metrics by evaluation set
    def _new_metrics(self) -> nn.ModuleDict:
        classes = len(self.label_names)
        return nn.ModuleDict(
            {
                "loss": MeanMetric(),
                "acc": MulticlassAccuracy(classes, average="micro"),
                "f1": MulticlassF1Score(classes, average="macro"),
            }
        )

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
    def classify(self, texts: Sequence[str], pairs: Sequence[str] | None = None, *, batch_size: int = 64) -> list[str]:
        """Label names for raw sentences (or pairs): the most probable class of :meth:`class_probabilities`."""
        probabilities = self.class_probabilities(texts, pairs, batch_size=batch_size)
        return [self.label_names[k] for k in probabilities.argmax(dim=-1).tolist()]

    def class_probabilities(
        self, texts: Sequence[str], pairs: Sequence[str] | None = None, *, batch_size: int = 64
    ) -> torch.Tensor:
        """(N, C) class probabilities (by ``label_names``) of raw sentences or sentence pairs (evaluation mode),
        assembled as ClassificationDataModule does (``add_cls=True``), truncated longest-first to ``max_len``."""
        results = torch.zeros(len(texts), len(self.label_names))
        for batch in self._text_batches(texts, pairs, batch_size):
            types = batch.get("token_type_ids")
            with torch.no_grad(), eval_mode(self):
                logits = self(batch["input_ids"], types)
            results[batch["index"]] = logits.float().softmax(dim=-1).cpu()
        return results

    def classify_texts(
        self, texts: Sequence[str], pairs: Sequence[str] | None = None, *, batch_size: int = 64
    ) -> list[dict[str, Any]]:
        """The records of :meth:`classify_batch` for raw sentences (or pairs), in their order; batches assembled as
        :meth:`class_probabilities` assembles them."""
        records = [r for batch in self._text_batches(texts, pairs, batch_size) for r in self.classify_batch(batch)]
        return in_order(records, len(records))

    def _text_batches(
        self, texts: Sequence[str], pairs: Sequence[str] | None, batch_size: int
    ) -> Iterator[dict[str, Any]]:
        """Batches (ClassificationCollator's, on the model's device) of raw texts, longest first."""
        tokenizer = self.tokenizer
        if tokenizer is None:
            raise ValueError("classify() needs the model's tokenizer (give tokenizer= at construction)")
        texts = check_texts(texts, "classify() texts")
        pairs = None if pairs is None else check_texts(pairs, "classify() pairs")
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(pairs)} pair texts")
        check_positive_int("batch_size", batch_size)
        first = Ragged.from_lists(tokenizer.encode_batch(texts))
        second = None if pairs is None else Ragged.from_lists(tokenizer.encode_batch(pairs))
        template = tokenizer.input_template(pair=second is not None, add_cls=self.adds_cls)
        limit = self.model.config.max_len - (self.model.cls_vector is not None)
        rows = np.arange(len(texts))
        data = LabelledDataset(first, second, np.zeros(len(texts), dtype=np.int64), texts, pairs, template, limit, rows)
        collate = ClassificationCollator(tokenizer.pad_id, second is not None)
        order = np.argsort(-data.lengths, kind="stable")
        for start in range(0, len(order), batch_size):
            batch = collate([data[i] for i in order[start : start + batch_size].tolist()])
            yield {
                key: value.to(self.device) if key in ("input_ids", "token_type_ids") else value
                for key, value in batch.items()
            }


def resolve_label_names(label_names: Sequence[str] | None, num_classes: int | None) -> list[str]:
    """The class names by label id: ``label_names`` (≥ 2, distinct), or ``"0"`` … ``"C−1"`` for ``num_classes``."""
    if label_names is None:
        if num_classes is None or num_classes < 2:
            raise ValueError(
                f"give label_names (the CLI links the datamodule's) or num_classes ≥ 2; got num_classes={num_classes}"
            )
        return [str(k) for k in range(num_classes)]
    names = [str(name) for name in label_names]
    if len(names) < 2 or len(set(names)) != len(names):
        raise ValueError(f"label_names must be ≥ 2 distinct names, got {names}")
    if num_classes is not None and num_classes != len(names):
        raise ValueError(f"num_classes={num_classes} disagrees with {len(names)} label_names {names}")
    return names
