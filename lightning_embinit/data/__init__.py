"""Data modules and the word-level vocabulary."""

from lightning_embinit.data.classification import CLASSIFICATION_DATASETS, ClassificationDataModule
from lightning_embinit.data.lm import LanguageModelDataModule, lee_corpus_paths
from lightning_embinit.data.raw_splits import RawSplits
from lightning_embinit.data.tokenization import TextTokenizer, build_tokenizer
from lightning_embinit.data.translation import TRANSLATION_DATASETS, TranslationDataModule
from lightning_embinit.data.vocabulary import SPECIAL_TOKENS, Vocabulary, WordTokenizer

__all__ = [
    "SPECIAL_TOKENS",
    "LanguageModelDataModule",
    "RawSplits",
    "Vocabulary",
    "WordTokenizer",
    "lee_corpus_paths",
    "CLASSIFICATION_DATASETS",
    "ClassificationDataModule",
    "TRANSLATION_DATASETS",
    "TextTokenizer",
    "TranslationDataModule",
    "build_tokenizer",
]
