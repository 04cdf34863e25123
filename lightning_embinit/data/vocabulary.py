"""Word-level tokenization and a frequency-built vocabulary (SPEC §1: "the vocabulary is built
from the training data with a minimum frequency").

Tokenizers (``tokenizer=``):

- ``regex`` (default): lowercases (``lowercase=True``) and splits text into words and single
  punctuation marks with :data:`WORD_PATTERN`: runs of letters/digits, which may contain inner
  apostrophes, hyphens, periods and colons ("don't", "well-known", "u.s", "4:00pm"), and every
  other non-space character alone.
- ``whitespace``: ``str.split()`` (after lowercasing when ``lowercase=True``), as GloVe/word2vec
  style pre-tokenized text expects.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence

from lightning_embinit.checks import check_choice
from lightning_embinit.modules.vocabulary import SPECIAL_TOKENS
from lightning_embinit.text_files import open_text

#: The ``regex`` word tokenizer: words (with inner apostrophes, dots, colons or hyphens) or one non-space symbol.
WORD_PATTERN = re.compile(r"\w+(?:['’.:\-]\w+)*|[^\w\s]", re.UNICODE)
TOKENIZERS = ("regex", "whitespace")


class WordTokenizer:
    """Text → list of word tokens (``regex`` or ``whitespace``, optional lowercasing)."""

    def __init__(self, kind: str = "regex", *, lowercase: bool = True) -> None:
        self.kind = check_choice("tokenizer", kind, TOKENIZERS)
        self.lowercase = lowercase

    def __call__(self, text: str) -> list[str]:
        if self.lowercase:
            text = text.lower()
        return WORD_PATTERN.findall(text) if self.kind == "regex" else text.split()


class Vocabulary(Sequence[str]):
    """Token strings indexed by id: special tokens first, then by descending frequency (ties by string)."""

    def __init__(self, tokens: Iterable[str], special_tokens: Mapping[str, str] | None = None) -> None:
        self.tokens = list(tokens)
        if bad := [t for t in self.tokens if not isinstance(t, str) or not t]:
            raise ValueError(f"vocabulary tokens must be non-empty strings; got {bad[:5]!r}")
        self.index = {token: i for i, token in enumerate(self.tokens)}
        if len(self.index) != len(self.tokens):
            repeated = [t for t, c in Counter(self.tokens).items() if c > 1]
            raise ValueError(f"a vocabulary cannot list the same token twice; repeated: {repeated[:10]!r}")
        specials = dict(SPECIAL_TOKENS if special_tokens is None else special_tokens)
        missing = [token for token in specials.values() if token not in self.index]
        if missing:
            raise ValueError(
                f"special tokens {missing} are not in the vocabulary (it needs all of {list(specials.values())})"
            )
        self.special_tokens = specials

    @classmethod
    def read(cls, path: str | os.PathLike[str], special_tokens: Mapping[str, str] | None = None) -> Vocabulary:
        """A vocabulary file: UTF-8, one token per line, line k = id k − 1 (as :meth:`write` makes)."""
        path = os.path.expanduser(os.fspath(path))
        if not os.path.isfile(path):
            raise ValueError(f"vocabulary file not found: {path}")
        with open_text(path, "vocabulary", newline="") as handle:
            lines = handle.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the final newline
        tokens = [line.removesuffix("\r") for line in lines]
        if empty := [k + 1 for k, token in enumerate(tokens) if not token]:
            raise ValueError(f"vocabulary file {path}: empty line(s) {empty[:10]} (one token per line)")
        try:
            return cls(tokens, special_tokens)
        except ValueError as error:
            raise ValueError(f"vocabulary file {path}: {error}") from None

    def write(self, path: str | os.PathLike[str]) -> None:
        """Save as :meth:`read` reads it: one token per line, by id."""
        if bad := [t for t in self.tokens if "\n" in t or t.endswith("\r")]:
            raise ValueError(f"tokens {bad[:5]!r} contain a line break; they cannot be written one per line")
        with open(os.path.expanduser(os.fspath(path)), "w", encoding="utf-8", newline="") as handle:
            handle.write("".join(f"{token}\n" for token in self.tokens))

    @classmethod
    def build(
        cls,
        sentences: Iterable[Sequence[str]],
        *,
        min_freq: int = 2,
        max_size: int | None = None,
        special_tokens: Mapping[str, str] | None = None,
    ) -> Vocabulary:
        """Count tokens in ``sentences``; keep those seen ≥ ``min_freq`` times, at most ``max_size`` rows in all."""
        if min_freq < 1:
            raise ValueError(f"min_freq must be ≥ 1, got {min_freq}")
        specials = dict(SPECIAL_TOKENS if special_tokens is None else special_tokens)
        counts = Counter(token for sentence in sentences for token in sentence)
        if not counts:
            raise ValueError("cannot build a vocabulary from an empty corpus (no tokens)")
        for token in specials.values():
            counts.pop(token, None)
        words = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
        if max_size is not None:
            if max_size <= len(specials):
                raise ValueError(f"max_size {max_size} leaves no room beside the {len(specials)} special tokens")
            words = words[: max_size - len(specials)]
        if not words:
            raise ValueError(
                f"the vocabulary would hold only the special tokens: no token occurs ≥ min_freq={min_freq} "
                f"times among {len(counts)} distinct tokens; lower min_freq or give more text"
            )
        return cls([*dict.fromkeys(specials.values()), *words], specials)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i):  # type: ignore[override]
        return self.tokens[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tokens)

    def __contains__(self, token: object) -> bool:
        return token in self.index

    def id(self, role: str) -> int | None:
        """The id of the special token playing ``role`` (``pad``, ``unk``, ``bos``, ``eos``), or None."""
        token = self.special_tokens.get(role)
        return None if token is None else self.index[token]

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Token strings → ids; unknown tokens map to ``<unk>`` (a ValueError without one)."""
        unk = self.id("unk")
        if unk is None:
            ids = []
            for token in tokens:
                if token not in self.index:
                    raise ValueError(f"token {token!r} is not in the vocabulary and it has no unk token")
                ids.append(self.index[token])
            return ids
        return [self.index.get(token, unk) for token in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.tokens[i] for i in ids]
