"""Where a slot's token strings come from (pre-trained sources align by them), in order: the model's
:class:`~lightning_embinit.init.host.EmbeddingHost` slots; the user's ``tokens=`` (a list, a token file, a Hugging Face
tokenizer name or directory, or a tokenizer object); the datamodule's ``vocabulary_for(slot)`` or ``vocabulary``; the
model's ``vocabulary``; the datamodule's, then the model's ``tokenizer``. The report's ``tokens_from`` says which.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from lightning_embinit.checks import looks_like_local_path
from lightning_embinit.init.host import ANY_EMBEDDING, EmbeddingSlot
from lightning_embinit.vocabulary import SPECIAL_ROLES, Vocabulary, read_token_file

TokenSpec = Sequence[str] | str | os.PathLike
"""A way to give a slot's tokens: a token list, a token file, or a Hugging Face tokenizer name/directory."""

WAYS_TO_GIVE_TOKENS = (
    "(1) implement EmbeddingHost.embedding_slots() returning EmbeddingSlot(tokens=[...]); "
    "(2) pass tokens= to EmbeddingInitCallback (a list of token strings by id, a file with one token per line, "
    "a Hugging Face tokenizer name or directory, or a tokenizer object), or a mapping slot → tokens; "
    "(3) use a datamodule with a `vocabulary` attribute (token strings by id) or a `vocabulary_for(slot)` method; "
    "(4) give the model a `vocabulary` attribute; "
    "(5) give the datamodule or the model a `tokenizer` attribute (a transformers, tokenizers, SentencePiece or "
    "litgpt tokenizer object)"
)


def tokenizer_vocabulary(name_or_path: str) -> Vocabulary:
    """The vocabulary of a Hugging Face tokenizer (a name or a directory) in id order."""
    from transformers import AutoTokenizer

    local = os.path.isdir(os.path.expanduser(name_or_path))
    try:
        tokenizer = AutoTokenizer.from_pretrained(os.path.expanduser(name_or_path), local_files_only=local)
    except (OSError, ValueError) as error:
        where = "directory" if local else "name (downloaded from the hub when a network exists)"
        raise ValueError(
            f"tokens={name_or_path!r}: cannot load a Hugging Face tokenizer from this {where}: {error}"
        ) from None
    return tokenizer_object_vocabulary(tokenizer, f"tokenizer {name_or_path}")


def tokenizer_object_tokens(tokenizer: Any) -> tuple[list[str], dict[str, Any]] | None:
    """(token strings by id, role → special token) of a tokenizer object, or None when it is none the package reads:
    a transformers tokenizer, a ``tokenizers.Tokenizer``, a SentencePiece processor, litgpt's ``Tokenizer`` (its
    ``processor``), the package's ``TextTokenizer``. Ids without a token get a placeholder that matches nothing."""
    if type(tokenizer).__module__.startswith("litgpt") and getattr(tokenizer, "processor", None) is not None:
        return tokenizer_object_tokens(tokenizer.processor)
    if isinstance(own := getattr(tokenizer, "vocabulary", None), Vocabulary):
        return list(own.tokens), dict(own.special_tokens)
    if callable(getattr(tokenizer, "id_to_piece", None)) and callable(getattr(tokenizer, "get_piece_size", None)):
        tokens = [tokenizer.id_to_piece(i) for i in range(tokenizer.get_piece_size())]
        ids = {role: getattr(tokenizer, f"{role}_id")() for role in ("pad", "unk", "bos", "eos")}
        return tokens, {role: tokens[i] for role, i in ids.items() if 0 <= i < len(tokens)}
    if not callable(getattr(tokenizer, "get_vocab", None)):
        return None
    by_token = tokenizer.get_vocab()
    size = max(by_token.values(), default=-1) + 1
    if hasattr(tokenizer, "__len__"):
        size = max(size, len(tokenizer))
    tokens = [f"\x00<no token for id {k}>" for k in range(size)] if size != len(by_token) else [""] * size
    for token, index in by_token.items():
        tokens[index] = token
    return tokens, {role: getattr(tokenizer, f"{role}_token", None) for role in SPECIAL_ROLES}


def tokenizer_object_vocabulary(tokenizer: Any, origin: str) -> Vocabulary | None:
    """The vocabulary of a tokenizer object in id order (:func:`tokenizer_object_tokens`), or None."""
    found = tokenizer_object_tokens(tokenizer)
    return None if found is None else _vocabulary(found[0], origin, found[1])


def load_tokens(spec: TokenSpec, *, what: str = "tokens=") -> Vocabulary:
    """The :class:`~lightning_embinit.vocabulary.Vocabulary` of a list, a token file, or a Hugging Face tokenizer
    (see module doc), its ``origin`` saying which; only a tokenizer names special tokens."""
    if isinstance(spec, (str, os.PathLike)):
        path = os.path.expanduser(os.fspath(spec))
        if os.path.isfile(path):
            tokens = read_token_file(path)
            origin = f"file {path}"
        elif os.path.isdir(path):
            return tokenizer_vocabulary(path)
        elif looks_like_local_path(os.fspath(spec)):
            raise ValueError(
                f"{what}{os.fspath(spec)!r}: no such file or directory (a token file, one token per line, "
                "or a Hugging Face tokenizer directory)"
            )
        else:
            return tokenizer_vocabulary(os.fspath(spec))
    elif isinstance(spec, Vocabulary):
        return spec
    elif isinstance(spec, Sequence):
        tokens, origin = list(spec), "a token list"
    elif (found := tokenizer_object_vocabulary(spec, f"{type(spec).__name__} object")) is not None:
        return found
    else:
        raise ValueError(
            f"{what} takes a list of token strings, a token file, a tokenizer name/directory or a tokenizer object "
            f"(transformers, tokenizers, SentencePiece, litgpt, TextTokenizer); got {type(spec).__name__}"
        )
    if bad := [t for t in tokens if not isinstance(t, str)]:
        raise ValueError(f"{what} token strings must be str; got {bad[:3]!r} from {origin}")
    return Vocabulary.from_tokens(tokens, {}, origin=origin)


def _vocabulary(tokens: Sequence[str], origin: str, special: Any) -> Vocabulary:
    """A vocabulary of ``tokens`` whose special tokens are those of ``special`` (role → string) that it holds."""
    present = set(tokens)
    named = special.items() if isinstance(special, Mapping) else ()
    kept = {role: token for role, token in named if isinstance(token, str) and token in present}
    return Vocabulary.from_tokens(tokens, kept, origin=origin)


def check_token_option(tokens: TokenSpec | Mapping[str, TokenSpec] | None) -> None:
    """Fail early (at construction) on a ``tokens=`` path that does not exist or a value of the wrong kind."""
    for value in tokens.values() if isinstance(tokens, Mapping) else [tokens]:
        if not isinstance(value, (str, os.PathLike)):
            if value is not None:
                load_tokens(value)
        elif looks_like_local_path(os.fspath(value)) and not os.path.exists(os.path.expanduser(os.fspath(value))):
            load_tokens(value)  # raises: no such file or directory


def _vocabulary_of(holder: Any, slot: str, what: str) -> Vocabulary | None:
    """``holder.vocabulary_for(slot)``, else ``holder.vocabulary`` (also when ``vocabulary_for`` does not know the
    slot), as a Vocabulary; None when it has neither, an error when it has only a ``vocabulary_for`` that refuses."""
    refused = None
    if callable(getattr(holder, "vocabulary_for", None)):
        origin = f"{what}.vocabulary_for({slot!r})"
        try:
            value = holder.vocabulary_for(slot)
        except (KeyError, ValueError) as error:
            refused = f"{origin} failed: {error}"
        else:
            special_for = getattr(holder, "special_tokens_for", None)
            special = (special_for(slot) if callable(special_for) else None) or {}
            return _vocabulary(load_tokens(value, what=f"{origin}: ").tokens, origin, special)
    value = getattr(holder, "vocabulary", None)
    if value is None or callable(value):
        if refused is not None:
            raise ValueError(
                f"slot {slot!r}: {refused}, and {what} has no single `vocabulary`; name the slot the "
                "datamodule knows, or pass EmbeddingInitCallback(tokens={slot: ...})"
            )
        return None
    origin = f"{what}.vocabulary"
    return _vocabulary(load_tokens(value, what=f"{origin}: ").tokens, origin, getattr(holder, "special_tokens", None))


def corpus_for_slot(datamodule: Any, slot: str) -> Callable[[], Iterable[Sequence[str]]] | None:
    """How to read ``slot``'s tokenized training text from ``datamodule`` (None when it has none for the slot):
    ``training_corpus(slot)`` when it knows the slot (or has no ``vocabulary_for``), else ``training_corpus()`` when it
    has a single ``vocabulary``."""
    method = getattr(datamodule, "training_corpus", None)
    if not callable(method):
        return None
    if callable(getattr(datamodule, "vocabulary_for", None)):
        try:
            datamodule.vocabulary_for(slot)
        except (KeyError, ValueError):
            return (lambda: method()) if getattr(datamodule, "vocabulary", None) is not None else None
    return lambda: method(slot)


def resolve_slot_tokens(
    slot: EmbeddingSlot,
    *,
    given: TokenSpec | Mapping[str, TokenSpec] | None = None,
    datamodule: Any = None,
    model: Any = None,
) -> tuple[EmbeddingSlot, str | None]:
    """``(slot with its token strings, where they came from)``, from the first source of the module doc; ``(slot,
    None)`` when none has them. A list longer than the table raises :class:`TableTooSmall`."""
    if slot.tokens is not None:
        return slot, "the model's embedding_slots()"
    candidates: list[Vocabulary | None] = []
    if given is not None:
        spec = given.get(slot.name) if isinstance(given, Mapping) else given
        if spec is not None:
            candidates.append(load_tokens(spec, what="tokens="))
    if datamodule is not None and not candidates:
        candidates.append(_vocabulary_of(datamodule, slot.name, type(datamodule).__name__))
    if model is not None and not any(candidates):
        vocabulary = getattr(model, "vocabulary", None)
        if vocabulary is not None and not callable(vocabulary):
            loaded = load_tokens(vocabulary, what=f"{type(model).__name__}.vocabulary: ")
            candidates.append(_vocabulary(loaded.tokens, f"{type(model).__name__}.vocabulary", loaded.special_tokens))
    for owner in (datamodule, model):
        tokenizer = getattr(owner, "tokenizer", None) if owner is not None and not any(candidates) else None
        if tokenizer is not None:
            origin = f"{type(owner).__name__}.tokenizer ({type(tokenizer).__name__})"
            candidates.append(tokenizer_object_vocabulary(tokenizer, origin))
    found = next((c for c in candidates if c is not None), None)
    if found is None:
        return slot, None
    if len(found.tokens) > slot.num_embeddings:
        raise TableTooSmall(
            f"slot {slot.name!r}: {found.origin} lists {len(found.tokens)} tokens, but the table has only "
            f"{slot.num_embeddings} rows",
            advice=resize_advice(slot.num_embeddings, len(found.tokens)),
        )
    special = dict(slot.special_tokens) or found.special_tokens
    return replace(slot, tokens=list(found.tokens), special_tokens=special), found.origin


class TableTooSmall(ValueError):
    """A vocabulary longer than the table it was given for: a token table not resized after tokens were added to its
    tokenizer, or a table of something else (positions, token types). ``problem`` states it, ``advice`` what to do
    when it is the token table; the message is both."""

    def __init__(self, problem: str, *, advice: str) -> None:
        super().__init__(f"{problem}: {advice}")
        self.problem, self.advice = problem, advice


def resize_advice(rows: int, tokens: int) -> str:
    """What to do when a tokenizer of ``tokens`` tokens meets its token table of ``rows`` rows."""
    return (
        f"the table needs resizing if its tokenizer gained the {tokens - rows} tokens it lacks: "
        f"model.resize_token_embeddings({tokens}) for a Hugging Face model, or "
        "lightning_embinit.extend_vocabulary(model, tokenizer, old_tokens=<the tokens before>), which keeps every "
        "trained row and starts the new ones from them (docs/vocabulary_extension.md); else give this model's own "
        "tokenizer"
    )


def missing_tokens_error(slot_name: str, source_name: str, family: str | None = None) -> ValueError:
    """The error for a pre-trained source on a slot without token strings, listing the ways to give them."""
    of = f" (the token table of {family})" if family and family != ANY_EMBEDDING else ""
    return ValueError(
        f"pre-trained source {source_name!r} aligns rows by token string, but slot {slot_name!r}{of} has none. "
        f"Give them in one of five ways: {WAYS_TO_GIVE_TOKENS}"
    )
