"""How a datamodule gets each tokenizer: a :class:`TokenizerPlan` (spec, options, training text), what
identifies it before training (:meth:`TokenizerPlan.key`, part of the tokenized-text cache key), and building it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from lightning_embinit.text.tokenization import TRAINED_OPTIONS, PretrainedTokenizer, TextTokenizer, build_tokenizer

TRAINED_KINDS = tuple(TRAINED_OPTIONS)
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

    @cached_property
    def ready(self) -> TextTokenizer:
        """The tokenizer of a spec that needs no training (pretrained, or a saved config), loaded once."""
        return build_tokenizer(self.spec)

    def key(self) -> dict[str, Any]:
        """What identifies the tokenizer before training: its options, and a trained kind's name or the
        fingerprint of the pretrained (or saved) tokenizer it starts from."""
        options = {k: v for k, v in sorted(self.options.items()) if v is not None}
        if self.trained:
            return {"spec": self.spec, "options": options}
        return {"fingerprint": self.ready.fingerprint(), "options": options}

    def build(self, name: str) -> TextTokenizer:
        """The tokenizer ``name``: trained on its text, loaded, or loaded and restricted to the training text."""
        if self.trained:
            return build_tokenizer(self.spec, self.training_text, **self.options)
        ready = self.ready
        if not self.options.get("restrict_vocabulary"):
            return ready
        if not isinstance(ready, PretrainedTokenizer) or ready.subset is not None:
            raise ValueError(
                f"restrict_vocabulary=True applies to a full pretrained tokenizer; {name!r} is a "
                f"{ready.kind} tokenizer{' already restricted' if ready.kind == 'pretrained' else ''}"
            )
        return ready.restricted(self.training_text(), min_freq=self.options.get("min_freq") or 1)
