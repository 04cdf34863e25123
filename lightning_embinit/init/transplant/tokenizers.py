"""The two tokenizers of a transplant as one interface: token strings by id, special tokens by role, and texts → ids.

A tokenizer is a Hugging Face tokenizer (an object, or a directory :func:`load_tokenizer` opens), a
``tokenizers.Tokenizer``, a SentencePiece processor, litgpt's ``Tokenizer``, the package's ``TextTokenizer``, or a
plain token list (which splits nothing: it serves matching, not the methods that split text).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning_embinit.init.tokens import tokenizer_object_tokens
from lightning_embinit.vocabulary import read_token_file

Encoder = Callable[[list[str]], list[list[int]]]


@dataclass
class TokenizerView:
    """A tokenizer as a transplant reads it: ``tokens`` by id, ``special`` role → token, ``encode`` texts → ids (None:
    it cannot split text), ``unknown`` ids dropped from what it splits, and the object itself (``source``)."""

    tokens: list[str]
    special: dict[str, str] = field(default_factory=dict)
    encode: Encoder | None = None
    unknown: frozenset[int] = frozenset()
    source: Any = None

    def pieces(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's ids without unknown pieces (and without ids past the vocabulary)."""
        if self.encode is None:
            raise ValueError("this tokenizer is a token list: it cannot split text; pass the tokenizer itself")
        size, unknown = len(self.tokens), self.unknown
        return [[i for i in ids if 0 <= i < size and i not in unknown] for ids in self.encode(list(texts))]

    def token_pieces(self, texts: Sequence[str]) -> list[list[str]]:
        """Each text as token strings (unknown pieces kept)."""
        if self.encode is None:
            raise ValueError("this tokenizer is a token list: it cannot split text; pass the tokenizer itself")
        return [[self.tokens[i] for i in ids if 0 <= i < len(self.tokens)] for ids in self.encode(list(texts))]


def load_tokenizer(spec: Any, *, what: str = "tokenizer") -> Any:
    """A Hugging Face tokenizer from a directory (offline); any other value is returned as it is."""
    if isinstance(spec, (str, os.PathLike)):
        path = os.path.expanduser(os.fspath(spec))
        if os.path.isfile(path):
            return read_token_file(path, what=what)
        if not os.path.isdir(path):
            raise ValueError(f"{what} {os.fspath(spec)!r}: no such directory (a Hugging Face tokenizer directory)")
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError) as error:
            raise ValueError(f"{what} {path}: not a Hugging Face tokenizer directory: {error}") from None
    return spec


def _encoder(tokenizer: Any) -> Encoder | None:
    """texts → ids without added special tokens, for every kind of tokenizer of the module doc."""
    if type(tokenizer).__module__.startswith("litgpt") and getattr(tokenizer, "processor", None) is not None:
        return lambda texts: [[int(i) for i in tokenizer.encode(text, bos=False, eos=False)] for text in texts]
    if callable(getattr(tokenizer, "convert_tokens_to_ids", None)) and callable(tokenizer):  # transformers
        return lambda texts: list(tokenizer(texts, add_special_tokens=False)["input_ids"]) if texts else []
    if type(tokenizer).__module__.startswith("tokenizers"):
        return lambda texts: [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)] if texts else []
    if callable(getattr(tokenizer, "encode_batch", None)):  # the package's TextTokenizer
        return lambda texts: [list(ids) for ids in tokenizer.encode_batch(texts)] if texts else []
    if callable(getattr(tokenizer, "id_to_piece", None)):  # SentencePiece
        return lambda texts: [list(tokenizer.encode(text)) for text in texts]
    return None


def tokenizer_view(spec: Any, *, what: str = "tokenizer") -> TokenizerView:
    """The :class:`TokenizerView` of anything the module doc lists (a directory is opened first)."""
    tokenizer = load_tokenizer(spec, what=what)
    if isinstance(tokenizer, TokenizerView):
        return tokenizer
    if isinstance(tokenizer, Sequence) and not isinstance(tokenizer, str):
        if bad := [t for t in tokenizer if not isinstance(t, str)]:
            raise ValueError(f"{what}: a token list holds strings; got {bad[:3]!r}")
        return TokenizerView(list(tokenizer))
    found = tokenizer_object_tokens(tokenizer)
    if found is None:
        raise ValueError(
            f"{what}: expected a Hugging Face tokenizer (object or directory), a tokenizers.Tokenizer, a "
            "SentencePiece processor, a litgpt or the package's tokenizer, or a token list; "
            f"got {type(tokenizer).__name__}"
        )
    tokens, roles = found
    present = set(tokens)
    special = {role: token for role, token in roles.items() if isinstance(token, str) and token in present}
    unknown = {getattr(tokenizer, name, None) for name in ("unk_id", "unk_token_id")}
    if "unk" in special:
        unknown.add(tokens.index(special["unk"]))
    unknown_ids = frozenset(i for i in unknown if isinstance(i, int) and i >= 0)
    return TokenizerView(tokens, special, _encoder(tokenizer), unknown_ids, tokenizer)


def special_ids(view: TokenizerView) -> Mapping[str, int]:
    """Role → id of the view's special tokens."""
    index = {token: i for i, token in enumerate(view.tokens)}
    return {role: index[token] for role, token in view.special.items() if token in index}
