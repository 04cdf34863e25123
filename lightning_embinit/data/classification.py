"""``ClassificationDataModule``: labelled sentences or sentence pairs → tokenizer → bucketed batches (issue 10).

Text: ``dataset="sst2"`` / ``"mnli"`` (GLUE, [K]) from the Hugging Face hub (downloaded in :meth:`prepare_data`),
or from GLUE-format files in ``data_dir``; or local TSV/CSV/JSON-lines files (``train_file``, ``val_files``,
``test_file``; ``.gz`` allowed) with ``text_column``, an optional ``text_pair_column`` and ``label_column``.

Batches (dicts): ``input_ids`` (B, L) padded with the tokenizer's pad id; ``token_type_ids`` (B, L) for sentence
pairs only; ``labels`` (B,); ``index`` (B,), each example's row in its split; ``text`` (and ``text_pair``) the raw
strings. Inputs: a pretrained tokenizer's own layout (BERT: ``[CLS] a [SEP] b [SEP]`` with its type ids); word
level and WordPiece: ``<cls>? a <sep> b`` (``add_cls``; the classifier's ``cls`` pooling reads that first token).
Pairs longer than ``max_length`` lose tokens from the longer text first (as Hugging Face's ``longest_first``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from typing_extensions import override

from lightning_embinit.data.parallel_text import TextColumns, find_file, load_hub_dataset, read_columns, require_columns
from lightning_embinit.data.text_module import RawSplits, SplitText, TokenizedTextDataModule
from lightning_embinit.text.batches import ClassificationCollator, LabelledDataset
from lightning_embinit.text.tokenization import TextTokenizer, TokenizerPlan, TokenizerSpec

FIELDS = ("a", "b")  # texts, pair texts


@dataclass(frozen=True)
class ClassificationTask:
    """A GLUE task: where its text is on the hub and in GLUE's own TSV files, and its label names."""

    hub_id: str
    config: str
    columns: tuple[str, str | None, str]  # hub: text, pair, label
    tsv_columns: tuple[str, str | None, str]  # GLUE TSV files
    label_names: tuple[str, ...]
    train: tuple[str, str]  # (hub split, TSV file)
    validation: dict[str, tuple[str, str]] = field(default_factory=dict)  # name → (hub split, TSV file)


CLASSIFICATION_DATASETS: dict[str, ClassificationTask] = {
    "sst2": ClassificationTask(
        "nyu-mll/glue",
        "sst2",
        ("sentence", None, "label"),
        ("sentence", None, "label"),
        ("negative", "positive"),
        ("train", "train.tsv"),
        {"validation": ("validation", "dev.tsv")},
    ),
    "mnli": ClassificationTask(
        "nyu-mll/glue",
        "mnli",
        ("premise", "hypothesis", "label"),
        ("sentence1", "sentence2", "gold_label"),
        ("entailment", "neutral", "contradiction"),
        ("train", "train.tsv"),
        {
            "matched": ("validation_matched", "dev_matched.tsv"),
            "mismatched": ("validation_mismatched", "dev_mismatched.tsv"),
        },
    ),
}
"""``dataset=`` names: GLUE SST-2 (binary sentiment) and MNLI (entailment; two validation sets). The GLUE
test splits carry no labels and are not read."""


MISSING_LABELS = ("", "nan")
"""Label cells that hold no label (compared lowercased): empty, or NaN as pandas writes a missing value."""


def label_key(value: Any) -> str | float | None:
    """What a label value stands for: None when missing (None, NaN, an empty cell), a float for a number (``1``,
    ``1.0`` and ``"1"`` are one label), else the stripped string."""
    if value is None:
        return None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        number = float(value)
        return None if math.isnan(number) else number
    text = str(value).strip()
    if text.lower() in MISSING_LABELS:
        return None
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


def _key_name(key: str | float) -> str:
    return str(int(key)) if isinstance(key, float) and key.is_integer() else str(key)


def infer_label_names(values: Sequence[Any]) -> list[str]:
    """Integer labels 0…k → ``["0", …, "k"]``, other numbers or strings → their sorted distinct values; missing
    labels left out."""
    keys = {key for key in map(label_key, values) if key is not None}
    if keys and all(isinstance(key, float) for key in keys):
        if all(key.is_integer() and key >= 0 for key in keys):
            return [str(k) for k in range(int(max(keys)) + 1)]
        return [_key_name(key) for key in sorted(keys)]
    return sorted({_key_name(key) for key in keys})


def label_ids(values: Sequence[Any], names: Sequence[str], where: str) -> np.ndarray:
    """Label values → ids: the name the value equals (as numbers for numbers), else an integer index into
    ``names`` that are not numbers themselves; other values raise."""
    lookup = {label_key(name): k for k, name in enumerate(names)}
    by_index = not all(isinstance(key, float) for key in lookup)
    ids = np.empty(len(values), dtype=np.int64)
    unknown: set[str] = set()
    for row, value in enumerate(values):
        key = label_key(value)
        if key in lookup:
            ids[row] = lookup[key]
        elif by_index and isinstance(key, float) and key.is_integer() and 0 <= key < len(names):
            ids[row] = int(key)
        else:
            unknown.add(str(value).strip())
    if unknown:
        index = " or its index" if by_index else ""
        raise ValueError(
            f"{where}: unknown label values {sorted(unknown)[:10]}; known labels: {list(names)} "
            f"(a label is one of these names{index})"
        )
    return ids


def check_labels_present(values: Sequence[Any], text: TextColumns, rows: Sequence[int], where: str) -> None:
    """Raise ValueError naming the first lines (rows) of ``rows`` whose label is missing (:func:`label_key`)."""
    missing = [row for row, value in zip(rows, values) if label_key(value) is None]
    if missing:
        raise ValueError(
            f"{where}: {len(missing)} of {len(rows)} rows have no label (empty, NaN, null or absent), "
            f"{text.where(missing[:10])}; fill them in or remove those rows"
        )


def display(key: str) -> str:
    """A split key as people say it: ``train``, ``test``, ``validation``, ``matched validation``."""
    name = key.removeprefix("val:")
    return name if name in ("train", "test", "validation") else f"{name} validation"


class ClassificationDataModule(TokenizedTextDataModule):
    """Sentence(-pair) classification data ([K]: SST-2, MNLI); see the module doc for text and batches.

    ``tokenizer``: ``"word"`` (``min_freq`` default 2), ``"wordpiece"``, ``"hf:<hub id, directory or known model>"``
    or a directory (``restrict_vocabulary=True``: only the training text's tokens, ``min_freq`` default 1), or a
    config dict / saved ``.json``; word level and WordPiece get ``cls`` and ``sep`` tokens. ``label_names``: given,
    the dataset's, or inferred from the training labels (integers 0…k, else the sorted strings); another label is an
    error. Validation sets: one, or several by name (``val_files`` as a dict; MNLI's ``matched``, ``mismatched``),
    each its own loader in :attr:`val_dataloader_names` order. The other ``settings`` are
    :class:`~lightning_embinit.data.text_module.TokenizedTextDataModule`'s.
    """

    training_text_hint = "train_file"
    field_tokenizers = dict.fromkeys(FIELDS, "tokens")

    def __init__(
        self,
        dataset: str | None = None,
        data_dir: str | None = None,
        train_file: str | None = None,
        val_files: str | dict[str, str] | None = None,
        test_file: str | None = None,
        text_column: str = "sentence",
        text_pair_column: str | None = None,
        label_column: str = "label",
        label_names: list[str] | None = None,
        file_format: str | None = None,
        dataset_revision: str | None = None,
        tokenizer: TokenizerSpec = "word",
        add_cls: bool = True,
        batch_size: int = 32,
        **settings: Any,
    ) -> None:
        super().__init__(tokenizer_specs={"tokenizer": tokenizer}, batch_size=batch_size, **settings)
        files_given = train_file is not None or val_files is not None or test_file is not None
        if dataset is not None:
            if dataset not in CLASSIFICATION_DATASETS:
                raise ValueError(f"unknown dataset {dataset!r}; datasets: {', '.join(CLASSIFICATION_DATASETS)}")
            if files_given:
                raise ValueError(
                    "give dataset (with data_dir for GLUE-format local files) or train_file/val_files/"
                    "test_file, not both"
                )
        elif data_dir is not None:
            raise ValueError(
                f"data_dir reads a GLUE task's files; name it with dataset= (one of: "
                f"{', '.join(CLASSIFICATION_DATASETS)}), or give train_file/val_files"
            )
        elif not files_given:
            names = ", ".join(CLASSIFICATION_DATASETS)
            raise ValueError(f"no text: give dataset (one of: {names}) or train_file/val_files/test_file")
        if label_names is not None and (len(label_names) < 2 or len(set(label_names)) != len(label_names)):
            raise ValueError(f"label_names must be ≥ 2 distinct names, got {label_names}")
        self._specs = {"tokens": tokenizer}

    # ------------------------------------------------------------------ text and labels
    @override
    def prepare_data(self) -> None:
        """Download the GLUE task into the ``datasets`` cache (once per node); local files need nothing."""
        if self.hparams.dataset is not None and self.hparams.data_dir is None:
            self._hub()

    def _hub(self) -> Any:
        task = CLASSIFICATION_DATASETS[self.hparams.dataset]
        return load_hub_dataset(task.hub_id, task.config, self.hparams.dataset_revision)

    def _sources(self) -> dict[str, tuple[str, TextColumns]]:
        """Split key → (description, columns) for every split that has text."""
        hp = self.hparams
        if hp.dataset is not None:
            task = CLASSIFICATION_DATASETS[hp.dataset]
            named = {"train": task.train, **{f"val:{name}": where for name, where in task.validation.items()}}
            if hp.data_dir is not None:
                return {
                    key: (path, read_columns(path, display(key), "tsv", hp.encoding))
                    for key, (_, file) in named.items()
                    for path in [find_file(hp.data_dir, file, f"{hp.dataset} {display(key)}")]
                }
            loaded = self._hub()
            if missing := [split for split, _ in named.values() if split not in loaded]:
                raise ValueError(f"dataset {hp.dataset!r} has no split {missing}; splits: {list(loaded)}")
            return {
                key: (f"{task.hub_id}/{task.config} {split}", TextColumns(loaded[split].to_dict()))
                for key, (split, _) in named.items()
            }
        val = hp.val_files
        named_files = {
            "train": hp.train_file,
            "test": hp.test_file,
            **({"val:validation": val} if isinstance(val, str) else {f"val:{k}": v for k, v in (val or {}).items()}),
        }
        return {
            key: (str(path), read_columns(str(path), display(key), hp.file_format, hp.encoding))
            for key, path in named_files.items()
            if path is not None
        }

    def _columns(self) -> tuple[str, str | None, str]:
        hp = self.hparams
        if hp.dataset is None:
            return hp.text_column, hp.text_pair_column, hp.label_column
        task = CLASSIFICATION_DATASETS[hp.dataset]
        return task.tsv_columns if hp.data_dir is not None else task.columns

    @override
    def _read_text(self) -> RawSplits:
        hp = self.hparams
        text_col, pair_col, label_col = self._columns()
        read: dict[str, tuple[str, dict[str, list[str]], list[Any]]] = {}
        blank: dict[str, int] = {}
        for key, (source, text) in self._sources().items():
            where = f"{display(key)} ({source})"
            require_columns(text.columns, [text_col, pair_col, label_col], where)
            fields = {
                field: [str(t or "").strip() for t in text.columns[column]]
                for field, column in zip(FIELDS, (text_col, pair_col))
                if column
            }
            kept = [k for k in range(len(fields["a"])) if all(texts[k] for texts in fields.values())]
            if not kept:
                raise ValueError(
                    f"{where}: no row has text in column {text_col!r}" + (f" and {pair_col!r}" if pair_col else "")
                )
            labels = [text.columns[label_col][k] for k in kept]
            where = f"{where}, column {label_col!r}"
            check_labels_present(labels, text, kept, where)
            blank[key] = len(fields["a"]) - len(kept)
            kept = kept[: hp.max_examples]
            read[key] = (where, {field: [texts[k] for k in kept] for field, texts in fields.items()}, labels)
        names = list(
            hp.label_names
            or (CLASSIFICATION_DATASETS[hp.dataset].label_names if hp.dataset else [])
            or infer_label_names(next(iter(read.values()))[2])
        )
        splits = {
            key: SplitText(fields, label_ids(labels[: len(fields["a"])], names, where))
            for key, (where, fields, labels) in read.items()
        }
        return RawSplits(splits, blank, tuple(names))

    @property
    def label_names(self) -> list[str]:
        """Class names by label id — link to the model's ``label_names``."""
        return list(self.raw_splits.label_names)

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    @property
    def is_pair(self) -> bool:
        return self._columns()[1] is not None

    @property
    def val_dataloader_names(self) -> list[str]:
        """Names of the validation sets, in the order of :meth:`val_dataloader`'s loaders."""
        return [key.removeprefix("val:") for key in self._val_splits()]

    def split_texts(self, split: str) -> tuple[list[str], list[str] | None, np.ndarray]:
        """(texts, pair texts or None, label ids) of ``split`` (``train``, ``test`` or a validation name)."""
        key = split if split in ("train", "test") else f"val:{split}"
        splits = self.raw_splits.splits
        if key not in splits:
            raise ValueError(f"no split {split!r}; splits: {['train', 'test', *self.val_dataloader_names]}")
        return splits[key].fields["a"], splits[key].fields.get("b"), splits[key].labels

    # ------------------------------------------------------------------ tokenizer and slot
    @override
    def _tokenizer_plans(self) -> dict[str, TokenizerPlan | str]:
        return {"tokens": self._plan(self.hparams.tokenizer, FIELDS, default_min_freq=2, roles=["cls", "sep"])}

    @property
    def tokenizer(self) -> TextTokenizer:
        return self.corpus.tokenizer("tokens")

    @property
    def tokenizer_config(self) -> dict[str, Any]:
        """The tokenizer's complete config — link it to the model's ``tokenizer``."""
        return self.corpus.tokenizers["tokens"]

    @property
    def vocabulary(self) -> list[str]:
        """Token strings by id: the rows of the ``tokens`` embedding."""
        return list(self.tokenizer.tokens)

    @override
    def _slot_fields(self, slot: str | None) -> tuple[str, ...]:
        """The one slot, ``tokens`` (also None): texts and pair texts."""
        if slot not in (None, "tokens"):
            raise ValueError(f"unknown slot {slot!r}; a classifier has one slot: tokens")
        return FIELDS

    # ------------------------------------------------------------------ datasets and loaders
    @override
    def _val_splits(self) -> list[str]:
        return [key for key in self.raw_splits.splits if key.startswith("val:")]

    @override
    def _missing_split(self, split: str) -> str:
        return f"no {display(split)} split; give its file (splits: {list(map(display, self.raw_splits.splits))})"

    @override
    def _make_dataset(self, key: str) -> tuple[LabelledDataset, ClassificationCollator]:
        split = self.raw_splits.splits[key]
        sequences = self.corpus.sequences
        a, b = sequences[f"{key}/a"], sequences.get(f"{key}/b")
        template = self.tokenizer.input_template(pair=b is not None, add_cls=self.hparams.add_cls)
        specials = sum(isinstance(part, int) for part, _ in template)
        lengths = a.lengths + (b.lengths if b is not None else 0) + specials
        rows = self._limit_lengths(key.removeprefix("val:"), lengths)
        if not len(rows):
            raise ValueError(f"the {display(key)} split has no example within max_length={self.hparams.max_length}")
        texts, pairs = split.fields["a"], split.fields.get("b")
        dataset = LabelledDataset(a, b, split.labels, texts, pairs, template, self.hparams.max_length, rows)
        return dataset, ClassificationCollator(self.tokenizer.pad_id, b is not None)
