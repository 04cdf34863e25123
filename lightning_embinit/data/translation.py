"""``TranslationDataModule``: parallel text → per-side tokenizers → length-bucketed (src, tgt) batches (issue 8).

Text, first match wins per split: ``train_files``/``val_files``/``test_files`` ([source path, target path]);
``data_dir`` with ``<stem>.<lang>`` files (``.gz`` allowed; the default stems fit Multi30k's ``train``, ``val``,
``test_2016_flickr``); or ``dataset``, a Hugging Face dataset (:data:`TRANSLATION_DATASETS`).

Batches (dicts): ``src`` (B, S) = ids + [eos], padded with the source pad id; ``tgt`` (B, T) = [bos] + ids + [eos],
padded with the target pad id (a model reads ``tgt[:, :-1]`` and predicts ``tgt[:, 1:]``); ``src_text``,
``tgt_text`` (raw strings); ``index`` (B,), each pair's position in its split (evaluation batches are length-sorted).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from typing_extensions import override

from lightning_embinit.data.parallel_text import find_file, keep_complete_pairs, load_hub_dataset, read_parallel
from lightning_embinit.data.text_module import RawSplits, SplitText, TokenizedTextDataModule
from lightning_embinit.text.batches import Ragged, pad_sequences
from lightning_embinit.text.tokenization import TextTokenizer, TokenizerPlan, TokenizerSpec

HUB_SPLITS = {"train": "train", "val": "validation", "test": "test"}
SIDES = ("src", "tgt")


@dataclass(frozen=True)
class TranslationDataset:
    """A Hugging Face translation dataset: its id, config per language pair, and where the text is."""

    hub_id: str
    configs: dict[tuple[str, str], str | None]  # (first, second) language → config name; either direction works
    layout: str  # "columns": one column per language; "translation": a dict column keyed by language
    min_freq: int = 2
    keys: tuple[tuple[str, str], ...] = ()  # language → the dict key, where they differ

    def resolve(self, name: str, src: str, tgt: str) -> tuple[str | None, str, str]:
        """(config, source key, target key) of the pair ``src``→``tgt``; a ValueError lists the known pairs."""
        config = self.configs.get((src, tgt), self.configs.get((tgt, src), "?"))
        if config == "?":
            pairs = sorted(f"{a}-{b}" for first, second in self.configs for a, b in ((first, second), (second, first)))
            raise ValueError(f"dataset {name!r} has no language pair {src}-{tgt}; pairs: {', '.join(pairs)}")
        keys = dict(self.keys)
        return config, keys.get(src, src), keys.get(tgt, tgt)


TED_HRLR_PAIRS = {
    "en": ("az", "aztr", "be", "beru", "gl", "glpt", "pt", "ru", "tr"),
    "pt": ("es", "fr", "he", "it", "ru"),
}
"""Target language → the source languages ``neulab/ted_hrlr`` pairs with it (config ``<source>_to_<target>``)."""
TRANSLATION_DATASETS: dict[str, TranslationDataset] = {
    "multi30k": TranslationDataset("bentrevett/multi30k", {("de", "en"): None}, "columns"),
    "iwslt2017": TranslationDataset("IWSLT/iwslt2017", {("de", "en"): "iwslt2017-de-en"}, "translation", min_freq=5),
    "ted_hrlr": TranslationDataset(
        "neulab/ted_hrlr",
        {(src, tgt): f"{src}_to_{tgt}" for tgt, sources in TED_HRLR_PAIRS.items() for src in sources},
        "translation",
        keys=(("aztr", "az_tr"), ("beru", "be_ru"), ("glpt", "gl_pt")),
    ),
}
"""Names for ``dataset=``: Multi30k task 1 (Elliott et al. 2016), IWSLT 2017 TED talks ([K]; min_freq 5 by
default), and the TED talks of Qi et al. 2018 ([R]: pt–en and 13 more pairs). The iwslt2017 config
of the reverse direction is used as is, with the columns swapped."""


class ParallelDataset(Dataset):
    """Token ids and raw text of a split's kept ``rows``; ``lengths`` count special tokens, at most ``max_length``."""

    def __init__(
        self,
        src: Ragged,
        tgt: Ragged,
        src_texts: Sequence[str],
        tgt_texts: Sequence[str],
        rows: np.ndarray,
        lengths: np.ndarray,
        max_length: int,
    ) -> None:
        self.src, self.tgt, self.src_texts, self.tgt_texts, self.rows = src, tgt, src_texts, tgt_texts, rows
        self.src_cap, self.tgt_cap = max_length - 1, max_length - 2  # room for eos; for bos and eos
        self.lengths = np.minimum(lengths[rows], max_length)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = int(self.rows[i])
        return {
            "src": self.src[row][: self.src_cap],
            "tgt": self.tgt[row][: self.tgt_cap],
            "src_text": self.src_texts[row],
            "tgt_text": self.tgt_texts[row],
            "index": row,
        }


@dataclass(frozen=True)
class TranslationCollator:
    """Examples → the batch dict of the module doc (dynamic padding to the longest row)."""

    src_pad: int
    src_eos: int
    tgt_pad: int
    tgt_bos: int
    tgt_eos: int

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        src = [np.append(e["src"], self.src_eos) for e in examples]
        tgt = [np.concatenate(([self.tgt_bos], e["tgt"], [self.tgt_eos])) for e in examples]
        return {
            "src": pad_sequences(src, self.src_pad),
            "tgt": pad_sequences(tgt, self.tgt_pad),
            "src_text": [e["src_text"] for e in examples],
            "tgt_text": [e["tgt_text"] for e in examples],
            "index": torch.tensor([e["index"] for e in examples], dtype=torch.long),
        }


class TranslationDataModule(TokenizedTextDataModule):
    """Parallel text for encoder–decoder translation ([K], [R]); see the module doc for text and batches.

    Tokenizers (``src_tokenizer``; ``tgt_tokenizer`` defaults to its spec): ``"word"`` (the side's training text,
    ``min_freq`` 2, or 5 for ``iwslt2017``), ``"wordpiece"`` (trained on the side's training text),
    ``"hf:<hub id, directory or known model>"`` or a directory (``restrict_vocabulary=True`` keeps only the tokens
    the side's training text uses ≥ ``min_freq`` times, default 1: [K]'s N-token vocabulary), or a config dict /
    saved ``.json`` (e.g. a checkpoint's). ``shared_vocabulary=True`` trains one tokenizer on both sides' text (slot
    ``shared``). Both sides count their special tokens against ``max_length`` (128, as [R]); longer pairs are
    truncated or, with ``too_long="drop"``, left out of the training split (:attr:`length_report`). The other
    ``settings`` (bucketing :mod:`.batching`, caching :mod:`.text_cache`) are
    :class:`~lightning_embinit.data.text_module.TokenizedTextDataModule`'s.
    """

    field_tokenizers = {side: side for side in SIDES}

    def __init__(
        self,
        data_dir: str | None = None,
        src_lang: str = "de",
        tgt_lang: str = "en",
        train_stem: str | None = "train",
        val_stem: str | None = "val",
        test_stem: str | None = "test_2016_flickr",
        train_files: list[str] | None = None,
        val_files: list[str] | None = None,
        test_files: list[str] | None = None,
        dataset: str | None = None,
        dataset_revision: str | None = None,
        src_tokenizer: TokenizerSpec = "word",
        tgt_tokenizer: TokenizerSpec | None = None,
        shared_vocabulary: bool = False,
        **settings: Any,
    ) -> None:
        super().__init__(tokenizer_specs={"src_tokenizer": src_tokenizer, "tgt_tokenizer": tgt_tokenizer}, **settings)
        if src_lang == tgt_lang:
            raise ValueError(f"src_lang and tgt_lang are both {src_lang!r}")
        for name, files in (("train_files", train_files), ("val_files", val_files), ("test_files", test_files)):
            if files is not None and (isinstance(files, str) or len(files) != 2):
                raise ValueError(f"{name} takes [source file, target file], got {files!r}")
        if dataset is not None:
            if dataset not in TRANSLATION_DATASETS:
                raise ValueError(f"unknown dataset {dataset!r}; datasets: {', '.join(TRANSLATION_DATASETS)}")
            if data_dir is not None:
                raise ValueError("give data_dir (local files) or dataset (Hugging Face), not both")
            TRANSLATION_DATASETS[dataset].resolve(dataset, src_lang, tgt_lang)
        elif data_dir is None and train_files is None and val_files is None and test_files is None:
            raise ValueError(
                "no text: give data_dir (with <stem>.<lang> files), train_files/val_files/test_files, "
                f"or dataset (one of: {', '.join(TRANSLATION_DATASETS)})"
            )
        tgt_spec = src_tokenizer if tgt_tokenizer is None else tgt_tokenizer
        if shared_vocabulary and tgt_spec != src_tokenizer:
            raise ValueError("shared_vocabulary=True uses one tokenizer for both sides; give src_tokenizer only")
        self._specs = {"src": src_tokenizer, "tgt": tgt_spec}
        self._references: dict[str, list[str]] = {}

    # ------------------------------------------------------------------ text
    @override
    def prepare_data(self) -> None:
        """Download ``dataset`` into the ``datasets`` cache (Lightning runs this once per node); files need nothing."""
        if self.hparams.dataset is not None:
            self._hub_dataset()

    def _hub_dataset(self) -> tuple[Any, str, str]:
        spec = TRANSLATION_DATASETS[self.hparams.dataset]
        config, src_key, tgt_key = spec.resolve(self.hparams.dataset, self.hparams.src_lang, self.hparams.tgt_lang)
        return load_hub_dataset(spec.hub_id, config, self.hparams.dataset_revision), src_key, tgt_key

    @override
    def _read_text(self) -> RawSplits:
        hp = self.hparams
        splits: dict[str, SplitText] = {}
        blank: dict[str, int] = {}
        for split, read in self._read_hub() if hp.dataset is not None else self._read_files():
            src, tgt, blank[split] = read
            splits[split] = SplitText({"src": src[: hp.max_examples], "tgt": tgt[: hp.max_examples]})
        if not splits:
            raise ValueError("no split has text: all stems are None and no files were given")
        return RawSplits(splits, blank)

    def _read_hub(self) -> Iterator[tuple[str, tuple[list[str], list[str], int]]]:
        """(split, (source texts, target texts, blank pairs left out)) of each split of ``dataset``."""
        name = self.hparams.dataset
        loaded, src_key, tgt_key = self._hub_dataset()
        by_column = TRANSLATION_DATASETS[name].layout == "columns"
        for split, hub_split in HUB_SPLITS.items():
            if hub_split not in loaded:
                raise ValueError(f"dataset {name!r} has no split {hub_split!r}; splits: {list(loaded)}")
            table = loaded[hub_split]
            wanted = [src_key, tgt_key] if by_column else ["translation"]
            if missing := [c for c in wanted if c not in table.column_names]:
                raise ValueError(
                    f"dataset {name!r} split {hub_split!r}: no column {missing}; columns found: {table.column_names}"
                )
            if by_column:
                src, tgt = table[src_key], table[tgt_key]
            else:
                src, tgt = ([pair.get(key) for pair in table["translation"]] for key in (src_key, tgt_key))
            src, tgt = ([(text or "").strip() for text in side] for side in (src, tgt))
            yield split, keep_complete_pairs(src, tgt, f"{name} {split}")

    def _read_files(self) -> Iterator[tuple[str, tuple[list[str], list[str], int]]]:
        """(split, (source texts, target texts, blank pairs left out)) of each split with files or a stem."""
        hp = self.hparams
        for split in ("train", "val", "test"):
            files, stem = hp[f"{split}_files"], hp[f"{split}_stem"]
            if files is None and (hp.data_dir is None or stem is None):
                continue
            paths = files or [
                find_file(hp.data_dir, f"{stem}.{lang}", f"{split} {side}")
                for side, lang in (("source", hp.src_lang), ("target", hp.tgt_lang))
            ]
            yield split, read_parallel(str(paths[0]), str(paths[1]), f"{split} split", hp.encoding)

    def split_texts(self, split: str) -> tuple[list[str], list[str]]:
        """(source texts, target texts) of ``split`` (``train``, ``val``, ``test``), in ``index`` order."""
        splits = self.raw_splits.splits
        if split not in splits:
            raise ValueError(f"no {split!r} split; splits: {list(splits)}")
        return splits[split].fields["src"], splits[split].fields["tgt"]

    # ------------------------------------------------------------------ tokenizers and slots
    @override
    def _tokenizer_plans(self) -> dict[str, TokenizerPlan | str]:
        hp = self.hparams
        min_freq = TRANSLATION_DATASETS[hp.dataset].min_freq if hp.dataset is not None else 2
        if hp.shared_vocabulary:
            return {"src": self._plan(self._specs["src"], SIDES, default_min_freq=min_freq), "tgt": "src"}
        return {side: self._plan(self._specs[side], (side,), default_min_freq=min_freq) for side in SIDES}

    @property
    def src_tokenizer(self) -> TextTokenizer:
        return self.corpus.tokenizer("src")

    @property
    def tgt_tokenizer(self) -> TextTokenizer:
        return self.corpus.tokenizer("tgt")

    @property
    def src_tokenizer_config(self) -> dict[str, Any]:
        """The source tokenizer's complete config — link it to the model's ``src_tokenizer``."""
        return self.corpus.tokenizers["src"]

    @property
    def tgt_tokenizer_config(self) -> dict[str, Any]:
        return self.corpus.tokenizers["tgt"]

    @override
    def _slot_fields(self, slot: str | None) -> tuple[str, ...]:
        """Slots ``src``, ``tgt``, and ``shared`` (both sides' text) when one tokenizer serves both sides."""
        if slot in SIDES:
            return (slot,)
        if slot == "shared":
            if self.src_tokenizer.fingerprint() != self.tgt_tokenizer.fingerprint():
                raise ValueError(
                    "slot 'shared' needs one tokenizer for both sides (shared_vocabulary=True); "
                    "this datamodule has separate 'src' and 'tgt' vocabularies"
                )
            return SIDES
        raise ValueError(f"unknown slot {slot!r}; slots: src, tgt (and shared with shared_vocabulary=True)")

    def reference_texts(self, split: str) -> list[str]:
        """The target texts of ``split`` as the target tokenizer round-trips them (BLEU references), by ``index``."""
        if split not in self._references:
            tokenizer = self.tgt_tokenizer
            self._references[split] = [tokenizer.reference(text) for text in self.split_texts(split)[1]]
        return self._references[split]

    # ------------------------------------------------------------------ datasets and loaders
    @override
    def _val_splits(self) -> list[str]:
        return ["val"]

    @override
    def _missing_split(self, split: str) -> str:
        return f"no {split!r} split: give its files (or stem) or use a dataset that has one"

    @override
    def _make_dataset(self, split: str) -> tuple[ParallelDataset, TranslationCollator]:
        src_texts, tgt_texts = self.split_texts(split)
        src, tgt = self.corpus.sequences[f"{split}/src"], self.corpus.sequences[f"{split}/tgt"]
        lengths = np.maximum(src.lengths + 1, tgt.lengths + 2)
        rows = self._limit_lengths(split, lengths)
        if not len(rows):
            raise ValueError(f"the {split} split has no pair within max_length={self.hparams.max_length}")
        src_tok, tgt_tok = self.src_tokenizer, self.tgt_tokenizer
        collate = TranslationCollator(src_tok.pad_id, src_tok.eos_id, tgt_tok.pad_id, tgt_tok.bos_id, tgt_tok.eos_id)
        return ParallelDataset(src, tgt, src_texts, tgt_texts, rows, lengths, self.hparams.max_length), collate
