"""A language-modelling datamodule: text → word-level vocabulary or a pretrained sub-word tokenizer → packed
(input, target) windows.

Offline default corpus: the Lee corpus (Lee, Pincombe & Welsh 2005, "An empirical evaluation of models of text
document similarity"), ABC news articles that gensim ships as test data: ``lee_background.cor`` (300 articles,
≈60k words) trains, ``lee.cor`` (the study's 50 articles, ≈4k words, Latin-1) validates.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset
from typing_extensions import override

from lightning_embinit.checks import check_non_negative_int, check_positive_int, check_range
from lightning_embinit.data.parallel_text import read_lines as read_file_lines
from lightning_embinit.text.prompts import PromptDataset, collate_prompts
from lightning_embinit.text.text_tokenizer import WORD_TOKENIZERS, WordTokenizer
from lightning_embinit.text.tokenization import (
    TRAINED_OPTIONS,
    TextTokenizer,
    TokenizerSpec,
    build_tokenizer,
    check_tokenizer_spec,
)
from lightning_embinit.text_files import check_encoding, gensim_test_data, read_exact_lines
from lightning_embinit.vocabulary import Vocabulary


def lee_corpus_paths() -> tuple[str, str]:
    """(train, validation) paths of the Lee corpus inside the installed gensim."""
    return gensim_test_data("lee_background.cor"), gensim_test_data("lee.cor")


def read_lines(
    files: str | os.PathLike[str] | Sequence[str], *, encoding: str = "utf-8", what: str = "text"
) -> list[str]:
    """The non-blank lines of a file or of each file, stripped (``.gz`` files are decompressed); missing files raise."""
    paths = [files] if isinstance(files, (str, os.PathLike)) else files
    return [line for path in paths for line in read_file_lines(path, what, encoding) if line]


def given_vocabulary(vocabulary: Sequence[str] | str | os.PathLike[str]) -> Vocabulary:
    """A :class:`Vocabulary` from token strings by id or a one-token-per-line file; ValueErrors name the problem."""
    if isinstance(vocabulary, (str, os.PathLike)):
        return Vocabulary.read(vocabulary)
    try:
        return Vocabulary(vocabulary)
    except ValueError as error:
        raise ValueError(f"vocabulary=: {error}") from None


def base_vocabulary_of(spec: Sequence[str] | str | os.PathLike[str]) -> Vocabulary:
    """The vocabulary to extend: token strings, a token file, or a (``TiedEmbeddingLM``) checkpoint's ``.ckpt``."""
    if isinstance(spec, (str, os.PathLike)) and os.fspath(spec).endswith(".ckpt"):
        from lightning_embinit.init.sources.checkpoint_file import load_checkpoint_file

        checkpoint = load_checkpoint_file(spec, what="base_vocabulary checkpoint")
        tokens = (checkpoint.get("hyper_parameters") or {}).get("vocabulary") if isinstance(checkpoint, dict) else None
        if not tokens:
            raise ValueError(f"base_vocabulary checkpoint {os.fspath(spec)}: it keeps no `vocabulary` hyperparameter")
        return given_vocabulary([str(t) for t in tokens])
    return given_vocabulary(spec)


def extended_vocabulary(
    base: Vocabulary, sentences: Iterable[Sequence[str]], *, min_freq: int, max_size: int | None
) -> Vocabulary:
    """``base``, then the words of ``sentences`` it lacks seen ≥ ``min_freq`` times, most frequent first, up to
    ``max_size`` tokens in all."""
    try:
        learned = Vocabulary.build(sentences, min_freq=min_freq, special_tokens=base.special_tokens).tokens
    except ValueError:  # no word of the text is frequent enough: nothing to add
        learned = []
    known = set(base.tokens)
    new = [token for token in learned if token not in known]
    if max_size is not None:
        new = new[: max(0, max_size - len(base))]
    return Vocabulary([*base.tokens, *new], base.special_tokens)


def pretrained_tokenizer(spec: TokenizerSpec) -> TextTokenizer:
    """The sub-word tokenizer of a ``tokenizer=`` that names no word splitter: a pretrained tokenizer or a saved one."""
    try:
        if isinstance(spec, str) and spec in TRAINED_OPTIONS:  # trained on the text: not one stream for every rank
            raise ValueError(spec)
        check_tokenizer_spec(spec)
    except ValueError:
        raise ValueError(
            f"unknown tokenizer {spec!r}: a word splitter ({', '.join(WORD_TOKENIZERS)}), or a pretrained tokenizer: "
            "'hf:<hub id, local directory or known model name>' (e.g. hf:minilm), a tokenizer directory, a saved "
            "config (.json or dict)"
        ) from None
    return build_tokenizer(spec)


def pack(ids: Sequence[int], seq_len: int) -> torch.Tensor:
    """(S, seq_len + 1) windows of a token stream with stride L = ``seq_len``, the remainder dropped: row k holds
    ids[k·L : k·L + L + 1], the model reads the first L and predicts the last L."""
    stream = torch.tensor(ids, dtype=torch.long)
    count = (len(stream) - 1) // seq_len
    return (
        stream[: count * seq_len + 1].unfold(0, seq_len + 1, seq_len) if count > 0 else stream.new_empty(0, seq_len + 1)
    )


class LanguageModelDataModule(L.LightningDataModule):
    """Plain text (local files or a ``datasets`` name) as contiguous next-token windows (docs/concepts.md).

    Text: ``train_files``/``val_files`` (one document or sentence per line, ``.gz`` allowed); else ``dataset``
    (+ ``dataset_config``, ``text_column``, ``train_split``, ``val_split``) through ``datasets.load_dataset``; else
    the Lee corpus. Without validation text the last ``val_fraction`` of the training lines are held out;
    ``val_files`` alone (with ``vocabulary``) is validation-only.

    Tokens: :class:`~lightning_embinit.text.text_tokenizer.WordTokenizer` (``tokenizer`` ``regex`` or ``whitespace``),
    or a pretrained sub-word tokenizer (``hf:minilm``, a tokenizer name or directory, a saved config) whose tokens are
    then the vocabulary (:attr:`tokenizer_config`: link it to a model's ``tokenizer``); ``lowercase``, ``min_freq``,
    ``max_size`` and ``base_vocabulary`` are word-level options. Every line ends with the eos token. Word-level
    vocabulary: ``vocabulary`` when given (token strings by id, or a one-token-per-line file); else built from the
    training text with ``<pad>``, ``<unk>``, ``<bos>``, ``<eos>`` at ids 0–3. ``base_vocabulary`` (a trained model's
    tokens, file or ``.ckpt``) is extended instead: its ids kept, the training words it lacks seen ≥ ``min_freq``
    times appended (docs/vocabulary_extension.md); a ``vocabulary`` given beside it wins (``embinit fit
    --ckpt_path`` resuming a fine-tune gives its checkpoint's).

    Batches: ``(inputs, targets)`` long tensors of shape (``batch_size``, ``seq_len``), targets the inputs shifted by
    one. Under DDP Lightning's ``DistributedSampler`` gives each rank a disjoint 1/W share of the training windows;
    for validation it repeats ≤ W − 1 windows to fill the ranks, so ``val_loss`` is exact on one device only.

    :attr:`vocabulary` is available right after construction (it reads the training text then), to link to a
    model's ``vocabulary`` (``link_arguments("data.vocabulary", "model.init_args.vocabulary",
    apply_on="instantiate")``); a ``dataset`` is otherwise downloaded in :meth:`prepare_data`.

    ``predict_files``: prompts, one per line (lines end at ``\\n`` only, as ``embinit generate`` reads them; blank lines
    kept: they get empty outputs), for ``Trainer.predict``
    (``embinit predict``): batches of :mod:`lightning_embinit.text.prompts`, read with this module's tokenizer and
    vocabulary, in file order.
    """

    def __init__(
        self,
        train_files: str | list[str] | None = None,
        val_files: str | list[str] | None = None,
        dataset: str | None = None,
        dataset_config: str | None = None,
        text_column: str = "text",
        train_split: str = "train",
        val_split: str | None = "validation",
        encoding: str = "utf-8",
        tokenizer: TokenizerSpec = "regex",
        lowercase: bool = True,
        min_freq: int = 2,
        max_size: int | None = None,
        seq_len: int = 64,
        batch_size: int = 32,
        val_fraction: float = 0.1,
        num_workers: int = 0,
        vocabulary: list[str] | str | None = None,
        base_vocabulary: list[str] | str | None = None,
        predict_files: str | list[str] | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("seq_len", seq_len), ("batch_size", batch_size), ("min_freq", min_freq)):
            check_positive_int(name, value)
        check_positive_int("max_size", max_size, optional=True)
        check_non_negative_int("num_workers", num_workers)
        check_range("val_fraction", val_fraction, 0, 1, low_open=True, high_open=True)
        check_encoding(encoding)
        if train_files is not None and dataset is not None:
            raise ValueError("give train_files or dataset, not both")
        if val_files is not None and train_files is None and vocabulary is None:
            raise ValueError("val_files needs train_files (or vocabulary=, for validation-only data)")
        if val_files is not None and dataset is not None:
            raise ValueError("give val_files or dataset, not both")
        self.save_hyperparameters()
        word_level = isinstance(tokenizer, str) and tokenizer in WORD_TOKENIZERS
        self.tokenizer = None if word_level else pretrained_tokenizer(tokenizer)
        self.tokenize = WordTokenizer(tokenizer, lowercase=lowercase) if word_level else self.tokenizer.tokenize
        self._vocab = None if vocabulary is None else given_vocabulary(vocabulary)
        if self.tokenizer is not None:
            self._vocab = self._tokenizer_vocabulary(base_vocabulary)
        # a given vocabulary wins: `embinit fit --ckpt_path` resuming a fine-tune passes its checkpoint's (extended) one
        self._base_vocab = (
            None if base_vocabulary is None or vocabulary is not None else base_vocabulary_of(base_vocabulary)
        )
        self._text: dict[str, list[list[str]] | None] = {}  # "training" and "validation" token lists, once read
        self.train_set: TensorDataset | None = None
        self.val_set: TensorDataset | None = None

    def _tokenizer_vocabulary(self, base_vocabulary: Any) -> Vocabulary:
        """The sub-word tokenizer's vocabulary; a given ``vocabulary`` (a checkpoint's) must be its tokens."""
        own = self.tokenizer.vocabulary
        if base_vocabulary is not None:
            raise ValueError("base_vocabulary extends a word-level vocabulary; a pretrained tokenizer brings its own")
        if self._vocab is not None and list(self._vocab.tokens) != list(own.tokens):
            raise ValueError(
                f"vocabulary= ({len(self._vocab)} tokens) is not the tokenizer's own vocabulary ({len(own)} tokens)"
            )
        return own

    @property
    def tokenizer_config(self) -> dict[str, Any] | None:
        """The sub-word tokenizer's complete config (None for word-level text) — link it to a model's ``tokenizer``."""
        return None if self.tokenizer is None else self.tokenizer.to_config()

    # ------------------------------------------------------------------ text and vocabulary
    @override
    def prepare_data(self) -> None:
        """Download ``dataset`` into the ``datasets`` cache (once per node, before any :meth:`setup`)."""
        if self.hparams.dataset is not None:
            self._load_dataset()

    def _load_dataset(self) -> Any:
        import datasets

        # downloads and prepares on the first call; later calls (setup, other ranks) read the cache
        return datasets.load_dataset(self.hparams.dataset, self.hparams.dataset_config)

    def _read_text(self) -> tuple[list[str] | None, list[str] | None]:
        hp = self.hparams
        if hp.dataset is not None:
            return self._read_dataset()
        if hp.train_files is None and hp.val_files is None:
            train, val = lee_corpus_paths()
            return read_lines(train, what="training"), read_lines(val, encoding="latin-1", what="validation")
        return (
            None if hp.train_files is None else read_lines(hp.train_files, encoding=hp.encoding, what="training"),
            None if hp.val_files is None else read_lines(hp.val_files, encoding=hp.encoding, what="validation"),
        )

    def _read_dataset(self) -> tuple[list[str], list[str] | None]:
        hp = self.hparams
        loaded = self._load_dataset()
        if hp.train_split not in loaded:
            raise ValueError(f"dataset {hp.dataset!r} has no split {hp.train_split!r}; splits: {list(loaded)}")
        columns = loaded[hp.train_split].column_names
        if hp.text_column not in columns:
            raise ValueError(f"dataset {hp.dataset!r} has no column {hp.text_column!r}; columns: {columns}")

        def lines(split: str) -> list[str]:
            return [text.strip() for text in loaded[split][hp.text_column] if text and text.strip()]

        val = lines(hp.val_split) if hp.val_split is not None and hp.val_split in loaded else None
        return lines(hp.train_split), val

    def _tokenized(self, lines: list[str], what: str) -> list[list[str]]:
        sentences = [sentence for sentence in map(self.tokenize, lines) if sentence]
        if not sentences:
            raise ValueError(f"the {what} text is empty: no tokens after tokenization")
        return sentences

    def _load(self) -> None:
        """Read and tokenize the text (once); build the vocabulary unless one was given."""
        if self._text:
            return
        hp = self.hparams
        train, val = self._read_text()
        train_sentences = None if train is None else self._tokenized(train, "training")
        if val is None:
            held_out = max(1, round(len(train_sentences) * hp.val_fraction))
            if held_out >= len(train_sentences):
                raise ValueError(f"{len(train_sentences)} training lines are too few to hold out a validation share")
            train_sentences, val_sentences = train_sentences[:-held_out], train_sentences[-held_out:]
        else:
            val_sentences = self._tokenized(val, "validation")
        if self._vocab is None and self._base_vocab is not None:
            self._vocab = extended_vocabulary(
                self._base_vocab, train_sentences, min_freq=hp.min_freq, max_size=hp.max_size
            )
        elif self._vocab is None:
            self._vocab = Vocabulary.build(train_sentences, min_freq=hp.min_freq, max_size=hp.max_size)
        self._text = {"training": train_sentences, "validation": val_sentences}

    @property
    def vocab(self) -> Vocabulary:
        """The given :class:`Vocabulary`, else the one built from the training text (on first access)."""
        if self._vocab is None:
            self._load()
        return self._vocab  # type: ignore[return-value]

    @property
    def vocabulary(self) -> list[str]:
        """Token strings by id — what a model's ``vocabulary`` argument takes."""
        return list(self.vocab.tokens)

    @property
    def special_tokens(self) -> dict[str, str]:
        """Role → token string of the vocabulary's special tokens (``pad``, ``unk``, ``bos``, ``eos``)."""
        return dict(self.vocab.special_tokens)

    def training_corpus(self, slot: str | None = None) -> Iterable[list[str]]:
        """The tokenized training text, one token list per line (the same text for every slot)."""
        return self._sentences("training")

    def _sentences(self, what: str) -> list[list[str]]:
        self._load()
        sentences = self._text[what]
        if sentences is None:
            raise ValueError(
                "this datamodule has validation text only (val_files without train_files): no training text"
            )
        return sentences

    # ------------------------------------------------------------------ datasets and loaders
    def _windows(self, what: str) -> TensorDataset:
        """(inputs, targets) windows of the ``training`` or ``validation`` text, every line ending with eos."""
        eos = self.vocab.id("eos")
        ids = [i for sentence in self._sentences(what) for i in [*self.vocab.encode(sentence), eos]]
        windows = pack(ids, self.hparams.seq_len)
        if len(windows) == 0:
            raise ValueError(
                f"the {what} text has {len(ids)} tokens, fewer than seq_len + 1 = {self.hparams.seq_len + 1}"
            )
        return TensorDataset(windows[:, :-1], windows[:, 1:])

    @override
    def setup(self, stage: str | None = None) -> None:
        """Windows of the training (``fit`` or no stage) and validation text, read from files or the cache; nothing
        for ``predict`` (the prompts are read by :meth:`predict_dataloader`)."""
        if stage == "predict":
            return
        if stage in (None, "fit") and self.train_set is None:
            self.train_set = self._windows("training")
        if self.val_set is None:
            self.val_set = self._windows("validation")

    @override
    def train_dataloader(self) -> DataLoader:
        self.setup("fit")
        return DataLoader(
            self.train_set,
            batch_size=self.hparams.batch_size,
            shuffle=True,
            num_workers=self.hparams.num_workers,
            drop_last=len(self.train_set) > self.hparams.batch_size,
        )

    @override
    def val_dataloader(self) -> DataLoader:
        self.setup("validate")
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size, num_workers=self.hparams.num_workers)

    @override
    def predict_dataloader(self) -> DataLoader:
        """The prompts of ``predict_files`` in file order, ``batch_size`` at a time."""
        hp = self.hparams
        if hp.predict_files is None:
            raise ValueError(
                "LanguageModelDataModule has no prompts to predict from: give predict_files (one prompt per line; "
                "--data.init_args.predict_files FILE)"
            )
        files = [hp.predict_files] if isinstance(hp.predict_files, (str, os.PathLike)) else hp.predict_files
        prompts = [line for path in files for line in read_exact_lines(path, "predict", hp.encoding)]
        data = PromptDataset(prompts, lambda text: self.vocab.encode(self.tokenize(text)))
        return DataLoader(data, batch_size=hp.batch_size, collate_fn=collate_prompts, num_workers=hp.num_workers)
