"""How a datamodule gets each tokenizer: a :class:`TokenizerPlan` (spec, options, training text), what
identifies it before training (:func:`plan_key`, part of the tokenized-text cache key), and building it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lightning_embinit.text.tokenization import PretrainedTokenizer, TextTokenizer, build_tokenizer

TRAINED_KINDS = ("word", "wordpiece")
TokenizerSpec = str | dict[str, Any]


@dataclass
class TokenizerPlan:
    """How to get one tokenizer: a spec (:func:`build_tokenizer`), its options, and the training text it learns from."""

    spec: TokenizerSpec
    options: dict[str, Any]
    training_text: Callable[[], list[str]]

    @property
    def trained(self) -> bool:
        """Whether the tokenizer learns its vocabulary from the training text (word level, WordPiece)."""
        return isinstance(self.spec, str) and self.spec in TRAINED_KINDS


class ReadyTokenizers:
    """Tokenizers that need no training (pretrained, or a saved config), loaded once per name; builds every plan."""

    def __init__(self) -> None:
        self._loaded: dict[str, TextTokenizer] = {}

    def get(self, name: str, plan: TokenizerPlan) -> TextTokenizer:
        if name not in self._loaded:
            self._loaded[name] = build_tokenizer(plan.spec)
        return self._loaded[name]

    def build(self, name: str, plan: TokenizerPlan) -> TextTokenizer:
        """The tokenizer of ``plan``: trained on its text, loaded, or loaded and restricted to the training text."""
        if plan.trained:
            return build_tokenizer(plan.spec, plan.training_text, **plan.options)
        ready = self.get(name, plan)
        if not plan.options.get("restrict_vocabulary"):
            return ready
        if not isinstance(ready, PretrainedTokenizer) or ready.subset is not None:
            raise ValueError(
                f"restrict_vocabulary=True applies to a full pretrained tokenizer; {name!r} is a "
                f"{ready.kind} tokenizer{' already restricted' if ready.kind == 'pretrained' else ''}"
            )
        return ready.restricted(plan.training_text(), min_freq=plan.options.get("min_freq") or 1)


def plan_key(name: str, plan: TokenizerPlan, ready: ReadyTokenizers) -> dict[str, Any]:
    """What identifies a tokenizer before training: its options, and a trained kind's name or the
    fingerprint of the pretrained (or saved) tokenizer it starts from."""
    options = {k: v for k, v in sorted(plan.options.items()) if v is not None}
    if plan.trained:
        return {"spec": plan.spec, "options": options}
    return {"fingerprint": ready.get(name, plan).fingerprint(), "options": options}
