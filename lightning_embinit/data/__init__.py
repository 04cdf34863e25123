"""Data modules: language modelling, translation and classification text as batches."""

from lightning_embinit.data.classification import CLASSIFICATION_DATASETS, ClassificationDataModule
from lightning_embinit.data.lm import LanguageModelDataModule, lee_corpus_paths
from lightning_embinit.data.text_module import RawSplits
from lightning_embinit.data.translation import TRANSLATION_DATASETS, TranslationDataModule

__all__ = [
    "LanguageModelDataModule",
    "RawSplits",
    "lee_corpus_paths",
    "CLASSIFICATION_DATASETS",
    "ClassificationDataModule",
    "TRANSLATION_DATASETS",
    "TranslationDataModule",
]
