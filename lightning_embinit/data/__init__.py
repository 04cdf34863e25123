"""Data modules and the word-level vocabulary."""

from lightning_embinit.data.lm import LanguageModelDataModule, lee_corpus_paths
from lightning_embinit.data.vocabulary import SPECIAL_TOKENS, Vocabulary, WordTokenizer

__all__ = ["SPECIAL_TOKENS", "LanguageModelDataModule", "Vocabulary", "WordTokenizer", "lee_corpus_paths"]
