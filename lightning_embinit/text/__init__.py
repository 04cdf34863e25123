"""Text ↔ token ids, below the datamodules and the systems: the tokenizers (word level, WordPiece, pretrained) with
their configs, and token ids in memory and in batches (:mod:`~lightning_embinit.text.batches`). Torch-only."""

from lightning_embinit.text.text_tokenizer import WordTokenizer
from lightning_embinit.text.tokenization import TextTokenizer, build_tokenizer

__all__ = ["TextTokenizer", "WordTokenizer", "build_tokenizer"]
