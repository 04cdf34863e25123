"""What translation and classification datamodules share: the settings, the raw splits (:class:`RawSplits`),
tokenizers from specs (:class:`~lightning_embinit.text.tokenization.TokenizerPlan`), the tokenized-text cache, the
length limit, the bucketed loaders of every split, the slot API (``vocabulary_for``, ``special_tokens_for``,
``training_corpus``) and the cross-rank tokenizer check."""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import lightning as L
import numpy as np
import torch.distributed as dist
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset
from typing_extensions import override

from lightning_embinit.checks import check_choice, check_int, check_non_negative_int, check_positive_int
from lightning_embinit.data.batching import BucketBatchSampler, EpochSampler
from lightning_embinit.data.text_cache import TokenizedCorpus, cache_key, load_or_build, text_digest
from lightning_embinit.text.batches import Ragged
from lightning_embinit.text.text_tokenizer import WORD_TOKENIZERS
from lightning_embinit.text.tokenization import (
    TRAINED_OPTIONS,
    TextTokenizer,
    TokenizerPlan,
    TokenizerSpec,
    check_tokenizer_spec,
)
from lightning_embinit.text_files import check_encoding

TOO_LONG = ("truncate", "drop")
Collate = Callable[[list[dict[str, Any]]], dict[str, Any]]


@dataclass(frozen=True)
class SplitText:
    """One split as read, before tokenization: line-aligned texts by field name (``src``/``tgt`` for translation;
    ``a``, and ``b`` for sentence pairs, for classification), and the label ids of labelled text (None otherwise)."""

    fields: dict[str, list[str]]
    labels: np.ndarray | None = None


@dataclass(frozen=True)
class RawSplits:
    """Every split's text by split name, the rows left out per split for a blank text, and the label names
    (classification; empty otherwise)."""

    splits: Mapping[str, SplitText]
    blank: Mapping[str, int]
    label_names: tuple[str, ...] = ()

    def texts(self) -> dict[str, list[str]]:
        """``"<split>/<field>"`` → texts: what the corpus encodes (under the same keys) and its cache key digests."""
        return {
            f"{name}/{field}": texts for name, split in self.splits.items() for field, texts in split.fields.items()
        }


class TokenizedTextDataModule(L.LightningDataModule, abc.ABC):
    """Base of :class:`~lightning_embinit.data.translation.TranslationDataModule` and
    :class:`~lightning_embinit.data.classification.ClassificationDataModule`: subclasses implement the abstract
    hooks and ``field_tokenizers``. The tokenized corpus is cached under a key made of the raw text and the
    tokenizer plans (:mod:`.text_cache`), so the same text and settings are tokenized once.

    Args:
        restrict_vocabulary: a pretrained tokenizer keeps only the tokens the training text uses ≥ min_freq times
        min_freq: the fewest occurrences of a kept token, ≥ 1 (None: the kind's default)
        max_size: the most rows of a word-level vocabulary
        vocab_size: the size of a trained WordPiece vocabulary
        lowercase: lowercase before word-level and WordPiece tokenization
        word_tokenizer: how word-level tokenizers split text (regex, whitespace)
        max_length: the most tokens of an example, special tokens included
        too_long: what happens to longer examples (truncate, drop: training split only)
        max_examples: read at most this many examples per split
        encoding: the text encoding of the files read (``.gz`` files are decompressed first)
        batch_size: training examples per batch
        eval_batch_size: evaluation examples per batch (None: batch_size)
        pool_batches: batches per length-sorted pool of the training split
        num_workers: DataLoader worker processes
        seed: the shuffling seed (None: $PL_GLOBAL_SEED, else 0)
        cache: keep the tokenized text on disk as well as in memory
    """

    training_text_hint: ClassVar[str] = "training text"
    field_tokenizers: ClassVar[dict[str, str]]
    """Text field → the tokenizer that encodes it in every split."""
    _specs: dict[str, TokenizerSpec]

    def __init__(
        self,
        *,
        tokenizer_specs: Mapping[str, TokenizerSpec | None],
        restrict_vocabulary: bool = False,
        min_freq: int | None = None,
        max_size: int | None = None,
        vocab_size: int = 8000,
        lowercase: bool = True,
        word_tokenizer: str = "regex",
        max_length: int = 128,
        too_long: str = "truncate",
        max_examples: int | None = None,
        encoding: str = "utf-8",
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        pool_batches: int = 50,
        num_workers: int = 0,
        seed: int | None = None,
        cache: bool = True,
    ) -> None:
        super().__init__()
        for name, value in (("batch_size", batch_size), ("pool_batches", pool_batches), ("vocab_size", vocab_size)):
            check_positive_int(name, value)
        for name, value in (
            ("eval_batch_size", eval_batch_size),
            ("min_freq", min_freq),
            ("max_size", max_size),
            ("max_examples", max_examples),
        ):
            check_positive_int(name, value, optional=True)
        check_int("max_length (it counts the special tokens)", max_length, minimum=4)
        check_non_negative_int("num_workers", num_workers)
        check_int("seed", seed, optional=True)
        check_choice("too_long", too_long, TOO_LONG)
        check_choice("word_tokenizer", word_tokenizer, WORD_TOKENIZERS)
        check_encoding(encoding)
        for what, spec in tokenizer_specs.items():
            if spec is not None:
                check_tokenizer_spec(spec, what)
        self.save_hyperparameters(ignore=["tokenizer_specs"])  # with the subclass's own arguments
        self._datasets: dict[str, tuple[Dataset, Collate]] = {}
        self._checked_world = False
        self._token_corpora: dict[tuple[str, ...], list[list[str]]] = {}
        self.cache_origin: str | None = None
        self.length_report: dict[str, dict[str, int]] = {}
        """Per split: ``examples``, ``too_long`` (longer than ``max_length``), ``truncated``, ``dropped``."""

    # ------------------------------------------------------------------ subclass hooks
    @abc.abstractmethod
    def _read_text(self) -> RawSplits: ...

    @abc.abstractmethod
    def _tokenizer_plans(self) -> dict[str, TokenizerPlan | str]:
        """Tokenizer name → plan, or → the name of another tokenizer it shares."""

    @abc.abstractmethod
    def _make_dataset(self, split: str) -> tuple[Dataset, Collate]:
        """The dataset of ``split`` (with its ``lengths`` for bucketing) and the function that collates its batches."""

    @abc.abstractmethod
    def _slot_fields(self, slot: str | None) -> tuple[str, ...]:
        """The fields whose (first field's) tokenizer makes ``slot``'s rows and whose training text is its corpus."""

    @abc.abstractmethod
    def _val_splits(self) -> list[str]:
        """The validation splits, in loader order."""

    @abc.abstractmethod
    def _missing_split(self, split: str) -> str:
        """The error message for a loader of a split without text."""

    # ------------------------------------------------------------------ text, tokenizers, cache
    @cached_property
    def raw_splits(self) -> RawSplits:
        """The raw text (and labels) of every split (:meth:`_read_text`), read on first access."""
        return self._read_text()

    @cached_property
    def corpus(self) -> TokenizedCorpus:
        """The tokenized corpus: from the process's memory, the disk cache, or built now (once per datamodule)."""
        raw, plans = self.raw_splits, self._tokenizer_plans()
        tokenizers = {name: plan if isinstance(plan, str) else plan.key() for name, plan in plans.items()}
        key = cache_key(text=text_digest(raw.texts()), tokenizers=tokenizers, module=type(self).__name__)
        corpus, self.cache_origin = load_or_build(key, lambda: self._tokenize(raw, plans), disk=self.hparams.cache)
        return corpus

    def _plan(
        self, spec: TokenizerSpec, fields: Sequence[str], *, default_min_freq: int, roles: list[str] | None = None
    ) -> TokenizerPlan:
        """The tokenizer of ``spec`` trained on ``fields``' training text, with options from the hyperparameters."""
        hp = self.hparams
        options: dict[str, Any] = {}
        if isinstance(spec, str) and spec in TRAINED_OPTIONS:
            own = {"min_freq": default_min_freq if hp.min_freq is None else hp.min_freq, "roles": roles or None}
            options = {key: own[key] if key in own else hp[key] for key in TRAINED_OPTIONS[spec]}
        elif hp.restrict_vocabulary:
            options = {"restrict_vocabulary": True, "min_freq": 1 if hp.min_freq is None else hp.min_freq}
        return TokenizerPlan(spec, options, lambda: self._training_text(fields))

    def _tokenize(self, raw: RawSplits, plans: dict[str, TokenizerPlan | str]) -> TokenizedCorpus:
        built = {name: plan.build(name) for name, plan in plans.items() if isinstance(plan, TokenizerPlan)}
        tokenizers = {name: built[plan if isinstance(plan, str) else name] for name, plan in plans.items()}
        sequences = {
            f"{name}/{field}": Ragged.from_lists(tokenizers[self.field_tokenizers[field]].encode_batch(texts))
            for name, split in raw.splits.items()
            for field, texts in split.fields.items()
        }
        return TokenizedCorpus({name: t.to_config() for name, t in tokenizers.items()}, sequences, built=tokenizers)

    def _training_text(self, fields: Sequence[str]) -> list[str]:
        """The training split's texts of ``fields`` (those it has), in order; the vocabularies learn from them."""
        train = self.raw_splits.splits.get("train")
        if train is None:
            spec = self._specs[self.field_tokenizers[fields[0]]]
            raise ValueError(
                f"tokenizer {spec!r} learns its vocabulary from the training split, which is missing; "
                f"give {self.training_text_hint} or a saved tokenizer config (dict or .json)"
            )
        texts = train.fields
        return [text for field in fields if field in texts for text in texts[field]]

    def _check_world(self) -> None:
        """Every rank must hold the same tokenizers: compare their fingerprints across processes."""
        if self._checked_world or not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return
        mine = {name: self.corpus.tokenizer(name).fingerprint() for name in sorted(self.corpus.tokenizers)}
        everyone: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
        if any(other != everyone[0] for other in everyone):
            raise RuntimeError(
                "the ranks built different tokenizers (a WordPiece vocabulary trained in each process differs: "
                "the trainer breaks ties at random). Give every process the same cache directory "
                "($EMBINIT_CACHE_DIR, on a shared file system across nodes), or pass the tokenizer config saved "
                "by one run (TextTokenizer.to_config()) as the tokenizer spec."
            )
        self._checked_world = True

    # ------------------------------------------------------------------ slots
    def _slot_tokenizer(self, slot: str | None) -> TextTokenizer:
        return self.corpus.tokenizer(self.field_tokenizers[self._slot_fields(slot)[0]])

    def vocabulary_for(self, slot: str | None = None) -> list[str]:
        """Token strings by id of ``slot``'s tokenizer: the rows of that embedding (None: a one-slot module's slot)."""
        return list(self._slot_tokenizer(slot).tokens)

    def special_tokens_for(self, slot: str | None = None) -> dict[str, str]:
        """Role → token string of ``slot``'s special tokens."""
        return dict(self._slot_tokenizer(slot).special_tokens)

    def training_corpus(self, slot: str | None = None) -> list[list[str]]:
        """The training texts of ``slot`` as token strings (word2vec-trainset, coverage)."""
        fields = self._slot_fields(slot)
        if fields not in self._token_corpora:
            self._token_corpora[fields] = [
                tokens
                for field in fields
                for tokens in self.corpus.tokenizer(self.field_tokenizers[field]).tokenize_batch(
                    self._training_text((field,))
                )
            ]
        return self._token_corpora[fields]

    # ------------------------------------------------------------------ setup and datasets
    @override
    def setup(self, stage: str | None = None) -> None:
        """Tokenize (or read the cache) and build the datasets of the stage's splits (every split without a stage)."""
        self.corpus  # noqa: B018 (tokenizes or reads the cache)
        self._check_world()
        present, val = self.raw_splits.splits, self._val_splits()
        wanted = {"fit": ["train", *val], "validate": val, "test": ["test"], "predict": ["test"]}.get(
            stage or "", present
        )
        for split in wanted:
            if split in present:
                self.dataset(split)

    def dataset(self, split: str) -> Dataset:
        """The dataset of ``split``, made once with its collate function (:meth:`_make_dataset`)."""
        if split not in self._datasets:
            self._datasets[split] = self._make_dataset(split)
        return self._datasets[split][0]

    def _limit_lengths(self, split: str, lengths: np.ndarray) -> np.ndarray:
        """Rows of ``split`` to keep under ``too_long`` (``drop`` acts on the training split only: evaluation scores
        every example, truncated); counts go to :attr:`length_report` and the log."""
        max_length = self.hparams.max_length
        over = lengths > max_length
        too_long = int(over.sum())
        drop = self.hparams.too_long == "drop" and split == "train"
        self.length_report[split] = {
            "examples": len(lengths),
            "too_long": too_long,
            "max_length": max_length,
            "truncated": 0 if drop else too_long,
            "dropped": too_long if drop else 0,
        }
        if too_long:
            rank_zero_info(
                f"{type(self).__name__}: {too_long} of {len(lengths)} {split} examples are longer than "
                f"max_length={max_length} tokens; {'dropped' if drop else 'truncated'}"
            )
        return np.flatnonzero(~over) if drop else np.arange(len(lengths))

    # ------------------------------------------------------------------ loaders
    @override
    def train_dataloader(self) -> DataLoader:
        return self._split_loader("train", train=True)

    @override
    def val_dataloader(self) -> DataLoader | list[DataLoader]:
        """One loader per validation split; a single one gives a single loader."""
        loaders = [self._split_loader(split, train=False) for split in self._val_splits()]
        if not loaders:
            raise ValueError("no validation set: give val_files (or a dataset that has one)")
        return loaders[0] if len(loaders) == 1 else loaders

    @override
    def test_dataloader(self) -> DataLoader:
        return self._split_loader("test", train=False)

    @override
    def predict_dataloader(self) -> DataLoader:
        """The test split (else the first validation split), in length-sorted batches; ``index`` restores the order."""
        val = self._val_splits()
        return self._split_loader("test" if "test" in self.raw_splits.splits or not val else val[0], train=False)

    def _split_loader(self, split: str, *, train: bool) -> DataLoader:
        """Bucketed batches of ``split``; Lightning's distributed sampler is read, not applied twice (see .batching)."""
        if split not in self.raw_splits.splits:
            raise ValueError(self._missing_split(split))
        self._check_world()
        data, collate = self.dataset(split), self._datasets[split][1]
        hp = self.hparams
        batch_size = hp.batch_size if train or hp.eval_batch_size is None else hp.eval_batch_size
        seed = int(os.environ.get("PL_GLOBAL_SEED", 0)) if hp.seed is None else hp.seed
        options = {"shuffle": train, "seed": seed, "pool_batches": hp.pool_batches}
        data.bucket_options = options  # what a batch sampler Lightning re-creates from the dataset alone needs
        sampler = BucketBatchSampler(EpochSampler(len(data)), data.lengths, batch_size, **options)
        return DataLoader(
            data,
            batch_sampler=sampler,
            collate_fn=collate,
            num_workers=hp.num_workers,
            persistent_workers=hp.num_workers > 0,
        )
