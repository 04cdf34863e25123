"""How tokenizers spell the same text: byte-level BPE (GPT-2's ``Ġ`` for a leading space, every byte a printable
character), SentencePiece (``▁`` for a word start, ``<0xNN>`` byte-fallback tokens), WordPiece (``##`` for a
continuation), and word-level vocabularies (every token a whole word).

A token's canonical form is ``(word_start, bytes)``: ``Ġmann``, ``▁mann`` and WordPiece's ``mann`` are all
``(True, b"mann")``; ``ann``, ``ann`` and ``##ann`` are ``(False, b"ann")``; byte-level ``Ã`` and SentencePiece
``<0xC3>`` are ``(False, b"\\xc3")``. Two tokens with one canonical form stand for the same text, whatever the
tokenizer (docs/transplant.md, "Matching").
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Sequence

BYTE_LEVEL, SENTENCEPIECE, WORDPIECE, WORD = "byte_level", "sentencepiece", "wordpiece", "word"
CONVENTIONS = (BYTE_LEVEL, SENTENCEPIECE, WORDPIECE, WORD)
"""The spellings :func:`detect_convention` tells apart."""

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@functools.cache
def byte_characters() -> dict[int, str]:
    """Byte → the printable character byte-level BPE writes for it (Radford et al. 2019, GPT-2's encoder): the 188
    printable Latin-1 bytes stand for themselves, the other 68 (controls, space, …) for U+0100 onwards, in byte
    order (so the space, 0x20, is ``Ġ`` = U+0120)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {byte: chr(byte) for byte in printable}
    shifted = 0
    for byte in range(256):
        if byte not in mapping:
            mapping[byte] = chr(256 + shifted)
            shifted += 1
    return mapping


@functools.cache
def _byte_alphabet() -> tuple[frozenset[str], dict[int, int]]:
    """The 256 characters, and the ``str.translate`` table that turns each into the character of its byte value."""
    characters = byte_characters()
    return frozenset(characters.values()), {ord(character): byte for byte, character in characters.items()}


def byte_level_bytes(token: str) -> bytes | None:
    """The bytes a byte-level BPE token stands for, or None when a character is not one of the 256."""
    alphabet, table = _byte_alphabet()
    if not alphabet.issuperset(token):
        return None
    return token.translate(table).encode("latin-1")


def detect_convention(tokens: Sequence[str], special: Sequence[str] = ()) -> str:
    """The spelling of a vocabulary, from its tokens' marks (special tokens left out): byte-level BPE when ``Ġ``
    starts at least 5 % of them and every token is spelled with the 256 byte characters, SentencePiece when ``▁``
    starts at least 5 %, WordPiece when ``##`` does, else a word-level vocabulary."""
    skip = set(special)
    plain = [t for t in tokens if t not in skip and not (t.startswith("<") and t.endswith(">") and len(t) > 2)]
    if not plain:
        return WORD
    marks = Counter(
        "Ġ" if t.startswith("Ġ") else "▁" if t.startswith("▁") else "##" if t.startswith("##") else "" for t in plain
    )
    share = {mark: count / len(plain) for mark, count in marks.items()}
    alphabet = _byte_alphabet()[0]
    if share.get("Ġ", 0) >= 0.05 and all(alphabet.issuperset(t) for t in plain):
        return BYTE_LEVEL
    best = max(("▁", "##"), key=lambda mark: share.get(mark, 0))
    if share.get(best, 0) >= 0.05:
        return SENTENCEPIECE if best == "▁" else WORDPIECE
    return WORD


def canonical_form(token: str, convention: str) -> tuple[bool, bytes] | None:
    """``(word_start, bytes)`` of ``token`` spelled by ``convention`` (module doc); None when it has no text (an
    empty token, or a byte-level token with characters outside the 256)."""
    if convention == BYTE_LEVEL:
        data = byte_level_bytes(token)
        if data is None:
            return None
        return (True, data[1:]) if data.startswith(b" ") else (False, data)
    if convention == SENTENCEPIECE:
        if matched := _BYTE_TOKEN.fullmatch(token):
            return False, bytes([int(matched.group(1), 16)])
        return (True, token[1:].encode()) if token.startswith("▁") else (False, token.encode())
    if convention == WORDPIECE:  # the package's WordPiece also marks a word start with ▁
        if token.startswith("##") and len(token) > 2:
            return False, token[2:].encode()
        return True, (token[1:] if token.startswith("▁") and len(token) > 1 else token).encode()
    return (True, token.encode()) if token else None


def token_text(token: str, convention: str, *, leading_space: bool) -> str:
    """The text ``token`` stands for, for another tokenizer to split: its bytes decoded (invalid UTF-8 dropped),
    a word start as a leading space when ``leading_space`` (the splitting tokenizer is byte-level, which needs it to
    choose word-start pieces; the others mark a text's first word themselves)."""
    form = canonical_form(token, convention)
    if form is None:
        return token
    word_start, data = form
    text = data.decode("utf-8", errors="ignore")
    return " " + text if word_start and leading_space else text


def case_key(form: tuple[bool, bytes]) -> tuple[bool, str]:
    """The canonical form with its text lower-cased: the key of the ``case`` match (``lower``, not ``casefold``, which
    would make ``ß`` ``ss``)."""
    return form[0], form[1].decode("utf-8", errors="surrogateescape").lower()
