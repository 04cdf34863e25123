"""A model's vocabulary from a tokenizer or a size: what the systems hand their architecture."""

from __future__ import annotations

from typing import Any

from lightning_embinit.text.tokenization import TextTokenizer
from lightning_embinit.vocabulary import SPECIAL_TOKENS, Vocabulary


def resolve_tokenizer(
    tokenizer: Any,
    vocab_size: int | None,
    *,
    option: str = "tokenizer",
    size_option: str = "vocab_size",
    min_size: int = 2,
) -> tuple[Any, int]:
    """(``TextTokenizer`` or None, token-table size) of a model's vocabulary argument pair: a tokenizer
    (``TextTokenizer`` or its ``to_config()`` dict) or a size (≥ ``min_size``); a size given next to a
    tokenizer must agree with it. ``option``/``size_option``: the caller's argument names, for errors."""
    if tokenizer is None:
        if vocab_size is None or vocab_size < min_size:
            raise ValueError(
                f"give {option} (a tokenizer config, TextTokenizer.to_config(); the CLI links the "
                f"datamodule's) or {size_option} ≥ {min_size}; got {size_option}={vocab_size}"
            )
        return None, vocab_size
    if not isinstance(tokenizer, TextTokenizer):
        tokenizer = TextTokenizer.from_config(tokenizer)
    if vocab_size is not None and vocab_size != len(tokenizer):
        raise ValueError(f"{size_option}={vocab_size} disagrees with the {option}'s {len(tokenizer)} tokens")
    return tokenizer, len(tokenizer)


def side_vocabulary(side: str, tokenizer: Any, vocab_size: int | None) -> tuple[TextTokenizer | None, Vocabulary]:
    """One side of a translation model: its tokenizer (config dict or ``TextTokenizer``; :func:`resolve_tokenizer`)
    and vocabulary; without a tokenizer the special ids are the package's (pad 0, unk 1, bos 2, eos 3)."""
    tokenizer, size = resolve_tokenizer(
        tokenizer,
        vocab_size,
        option=f"{side}_tokenizer",
        size_option=f"{side}_vocab_size",
        min_size=len(SPECIAL_TOKENS) + 1,
    )
    return tokenizer, Vocabulary.numbered(size) if tokenizer is None else tokenizer.vocabulary


def followed_tokenizer(
    current: TextTokenizer | None, tokens: list[str], given: Any, *, option: str
) -> TextTokenizer | None:
    """The tokenizer of a side after its vocabulary became ``tokens``: ``given`` (a ``TextTokenizer`` or its config,
    whose tokens must be ``tokens``), else a word-level ``current`` rebuilt over ``tokens``; None without a tokenizer.
    A sub-word tokenizer cannot be rebuilt from a token list: ValueError asks for the new tokenizer."""
    if given is not None:
        tokenizer = given if isinstance(given, TextTokenizer) else TextTokenizer.from_config(given)
        if list(tokenizer.tokens) != list(tokens):
            raise ValueError(
                f"{option}: the given tokenizer's {len(tokenizer)} tokens are not the new vocabulary's {len(tokens)}"
            )
        return tokenizer
    if current is None:
        return None
    if current.kind != "word":
        raise ValueError(
            f"{option} is a {current.kind} tokenizer, which a token list cannot rebuild: pass the new tokenizer "
            "itself (extend_vocabulary(model, new_tokenizer), or a datamodule that has it)"
        )
    config = {**current.to_config(), "tokens": list(tokens)}
    return TextTokenizer.from_config(config)


def saved_tokenizer(config: Any) -> tuple[list[str] | None, TextTokenizer | None]:
    """(token strings, tokenizer) of a tokenizer config kept in a checkpoint's hyperparameters; (None, None) for
    None."""
    tokenizer = None if config is None else TextTokenizer.from_config(config)
    return (None if tokenizer is None else list(tokenizer.tokens), tokenizer)
