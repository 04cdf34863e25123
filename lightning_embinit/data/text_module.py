"""What translation and classification datamodules share: tokenizers from specs, the tokenized-text
cache, the length limit, bucketed loaders and the cross-rank tokenizer check."""

from __future__ import annotations

import abc
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lightning as L
import numpy as np
import torch.distributed as dist
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset

from lightning_embinit.data.batching import BucketBatchSampler, EpochSampler
from lightning_embinit.data.text_cache import Ragged, TokenizedCorpus, cache_key, load_or_build, text_digest
from lightning_embinit.data.subword import PretrainedTokenizer
from lightning_embinit.data.tokenization import TextTokenizer, build_tokenizer, check_tokenizer_spec
from lightning_embinit.data.vocabulary import TOKENIZERS

TOO_LONG = ("truncate", "drop")
TRAINED_KINDS = ("word", "wordpiece")
TokenizerSpec = str | dict[str, Any]


@dataclass
class TokenizerPlan:
    """How to get one tokenizer: a spec (:func:`build_tokenizer`), its options, and the training text it learns from."""

    spec: TokenizerSpec
    options: dict[str, Any]
    training_text: Callable[[], list[str]]


class TokenizedTextDataModule(L.LightningDataModule, abc.ABC):
    """Base of :class:`~lightning_embinit.data.translation.TranslationDataModule` and
    :class:`~lightning_embinit.data.classification.ClassificationDataModule`.

    Subclasses read their raw text (:meth:`_read_text`), say which tokenizers they need
    (:meth:`_tokenizer_plans`), encode every split (:meth:`_encode`) and make one split's dataset
    (:meth:`_make_dataset`). The tokenized corpus is cached under a key made of the raw text and
    the tokenizer plans (:mod:`.text_cache`); a second ``setup`` or datamodule with the same text
    and settings reads it instead of tokenizing again.
    """

    collate_fn: Any

    def __init__(self, *, batch_size: int, eval_batch_size: int | None, max_length: int, too_long: str,
                 max_examples: int | None, num_workers: int, seed: int | None, pool_batches: int, cache: bool,
                 word_tokenizer: str, tokenizer_specs: dict[str, Any]) -> None:
        super().__init__()
        if batch_size < 1 or (eval_batch_size is not None and eval_batch_size < 1):
            raise ValueError(f"batch sizes must be ≥ 1, got batch_size={batch_size}, eval_batch_size={eval_batch_size}")
        if max_length < 4:
            raise ValueError(f"max_length must be ≥ 4 (it counts the special tokens), got {max_length}")
        if too_long not in TOO_LONG:
            raise ValueError(f"unknown too_long {too_long!r}; choose one of: {', '.join(TOO_LONG)}")
        if word_tokenizer not in TOKENIZERS:
            raise ValueError(f"unknown word_tokenizer {word_tokenizer!r}; choose one of: {', '.join(TOKENIZERS)}")
        if num_workers < 0 or pool_batches < 1:
            raise ValueError(f"num_workers must be ≥ 0 and pool_batches ≥ 1, got {num_workers} and {pool_batches}")
        if max_examples is not None and max_examples < 1:
            raise ValueError(f"max_examples must be ≥ 1, got {max_examples}")
        for what, spec in tokenizer_specs.items():
            if spec is not None:
                check_tokenizer_spec(spec, what)
        self._raw: dict[str, Any] | None = None
        self._corpus: TokenizedCorpus | None = None
        self._ready: dict[str, TextTokenizer] = {}
        self._datasets: dict[str, Dataset] = {}
        self._checked_world = False
        self._token_corpora: dict[str, list[list[str]]] = {}
        self.collate_fn = None
        self.cache_origin: str | None = None
        self.length_report: dict[str, dict[str, int]] = {}
        """Per split: ``examples``, ``too_long`` (longer than ``max_length``), ``truncated``, ``dropped``."""

    # ------------------------------------------------------------------ subclass hooks
    @abc.abstractmethod
    def _read_text(self) -> dict[str, Any]:
        """The raw text (and labels) of every split, with ``"digestible"``: named lists that identify it."""

    @abc.abstractmethod
    def _tokenizer_plans(self) -> dict[str, TokenizerPlan | str]:
        """Tokenizer name → plan, or → the name of another tokenizer it shares."""

    @abc.abstractmethod
    def _encode(self, raw: dict[str, Any], tokenizers: dict[str, TextTokenizer]) -> dict[str, Ragged]:
        """Token ids of every split, by ``"<split>/<field>"``."""

    @abc.abstractmethod
    def _make_dataset(self, split: str) -> Dataset:
        """The dataset of ``split`` (with its ``lengths`` for bucketing)."""

    @abc.abstractmethod
    def _splits_for(self, stage: str | None) -> list[str]:
        """The splits ``setup(stage)`` prepares."""

    # ------------------------------------------------------------------ text, tokenizers, cache
    @property
    def raw_text(self) -> dict[str, Any]:
        if self._raw is None:
            self._raw = self._read_text()
        return self._raw

    @property
    def corpus(self) -> TokenizedCorpus:
        """The tokenized corpus: from this object, the process's memory, the disk cache, or built now."""
        if self._corpus is None:
            raw = self.raw_text
            tokenizers = {name: plan if isinstance(plan, str) else self._plan_key(name, plan)
                          for name, plan in self._tokenizer_plans().items()}
            key = cache_key(text=text_digest(raw["digestible"]), tokenizers=tokenizers, module=type(self).__name__)
            self._corpus, self.cache_origin = load_or_build(key, lambda: self._tokenize(raw), disk=self.hparams.cache)
        return self._corpus

    def _tokenizer_options(self, spec: TokenizerSpec, *, default_min_freq: int, roles: list[str] | None = None) -> dict[str, Any]:
        """The ``build_tokenizer`` options of ``spec`` from this module's hyperparameters (``roles``: trained kinds only)."""
        hp = self.hparams
        extra = {"roles": roles} if roles else {}
        if spec == "word":
            return {"min_freq": hp.min_freq or default_min_freq, "max_size": hp.max_size, "lowercase": hp.lowercase,
                    "word_tokenizer": hp.word_tokenizer, **extra}
        if spec == "wordpiece":
            return {"vocab_size": hp.vocab_size, "min_freq": hp.min_freq or default_min_freq, "lowercase": hp.lowercase, **extra}
        return {"restrict_vocabulary": True, "min_freq": hp.min_freq or 1} if hp.restrict_vocabulary else {}

    def _plan_key(self, name: str, plan: TokenizerPlan) -> Any:
        """What identifies a tokenizer before training: its options, and a trained kind's name or the
        fingerprint of the pretrained (or saved) tokenizer it starts from."""
        options = {k: v for k, v in sorted(plan.options.items()) if v is not None}
        if isinstance(plan.spec, str) and plan.spec in TRAINED_KINDS:
            return {"spec": plan.spec, "options": options}
        return {"fingerprint": self._ready_tokenizer(name, plan).fingerprint(), "options": options}

    def _ready_tokenizer(self, name: str, plan: TokenizerPlan) -> TextTokenizer:
        """A tokenizer that needs no training (pretrained, or a saved config), loaded once."""
        if name not in self._ready:
            self._ready[name] = build_tokenizer(plan.spec)
        return self._ready[name]

    def _build(self, name: str, plan: TokenizerPlan) -> TextTokenizer:
        if isinstance(plan.spec, str) and plan.spec in TRAINED_KINDS:
            return build_tokenizer(plan.spec, plan.training_text, **plan.options)
        ready = self._ready_tokenizer(name, plan)
        if not plan.options.get("restrict_vocabulary"):
            return ready
        if not isinstance(ready, PretrainedTokenizer) or ready.subset is not None:
            raise ValueError(f"restrict_vocabulary=True applies to a full pretrained tokenizer; {name!r} is a "
                             f"{ready.kind} tokenizer{' already restricted' if ready.kind == 'pretrained' else ''}")
        return ready.restricted(plan.training_text(), min_freq=plan.options.get("min_freq") or 1)

    def _tokenize(self, raw: dict[str, Any]) -> TokenizedCorpus:
        plans = self._tokenizer_plans()
        tokenizers: dict[str, TextTokenizer] = {}
        for name, plan in plans.items():
            if isinstance(plan, TokenizerPlan):
                tokenizers[name] = self._build(name, plan)
        for name, plan in plans.items():
            if isinstance(plan, str):
                tokenizers[name] = tokenizers[plan]
        sequences = self._encode(raw, tokenizers)
        return TokenizedCorpus({name: t.to_config() for name, t in tokenizers.items()}, sequences, built=tokenizers)

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

    # ------------------------------------------------------------------ setup and loaders
    def setup(self, stage: str | None = None) -> None:
        """Tokenize (or read the cache) and build the datasets of the stage's splits."""
        self.corpus  # noqa: B018 (tokenizes or reads the cache)
        self._check_world()
        for split in self._splits_for(stage):
            self.dataset(split)

    def dataset(self, split: str) -> Dataset:
        if split not in self._datasets:
            self._datasets[split] = self._make_dataset(split)
        return self._datasets[split]

    def _limit_lengths(self, split: str, lengths: np.ndarray, limit: int) -> np.ndarray:
        """Rows of ``split`` to keep under the ``too_long`` policy (``drop`` acts on the training split only:
        evaluation keeps every example, truncated, so its scores cover the whole set); counts go to
        :attr:`length_report` and are logged once."""
        over = lengths > limit
        drop = self.hparams.too_long == "drop" and split == "train"
        report = {"examples": int(len(lengths)), "too_long": int(over.sum()), "max_length": self.hparams.max_length,
                  "truncated": 0 if drop else int(over.sum()), "dropped": int(over.sum()) if drop else 0}
        self.length_report[split] = report
        if report["too_long"]:
            action = "dropped" if drop else "truncated"
            rank_zero_info(f"{type(self).__name__}: {report['too_long']} of {report['examples']} {split} examples are "
                           f"longer than max_length={self.hparams.max_length} tokens; {action}")
        return np.flatnonzero(~over) if drop else np.arange(len(lengths))

    def _seed(self) -> int:
        if self.hparams.seed is not None:
            return int(self.hparams.seed)
        return int(os.environ.get("PL_GLOBAL_SEED", 0))

    def _loader(self, split: str, *, train: bool) -> DataLoader:
        """Bucketed batches of ``split``; Lightning's distributed sampler is read, not applied twice (see .batching)."""
        self.corpus  # noqa: B018 (tokenizes or reads the cache)
        self._check_world()
        data = self.dataset(split)
        batch_size = self.hparams.batch_size if train else (self.hparams.eval_batch_size or self.hparams.batch_size)
        # With use_distributed_sampler=True Lightning re-creates this batch sampler around a DistributedSampler;
        # BucketBatchSampler only reads its rank, world size and epoch and shards the batches itself (never twice).
        options = {"shuffle": train, "seed": self._seed(), "pool_batches": self.hparams.pool_batches}
        data.bucket_options = options  # what a batch sampler Lightning re-creates from the dataset alone needs
        sampler = BucketBatchSampler(EpochSampler(len(data)), data.lengths, batch_size, **options)
        return DataLoader(data, batch_sampler=sampler, collate_fn=self.collate_fn, num_workers=self.hparams.num_workers,
                          persistent_workers=self.hparams.num_workers > 0)

