"""A trained model with a new tokenizer (:func:`transplant_tokenizer`): matching across spellings, the methods that
build the other rows, the plan, the write and the report, each in its module (docs/transplant.md)."""

from lightning_embinit.init.transplant.matching import DEFAULT_MATCH, MATCH_KINDS, VocabularyMatch, match_vocabularies
from lightning_embinit.init.transplant.methods import METHODS, resolve_method
from lightning_embinit.init.transplant.plan import TransplantPlan
from lightning_embinit.init.transplant.report import format_transplant_report, transplant_metrics
from lightning_embinit.init.transplant.sparse import orthogonal_matching_pursuit, sparsemax
from lightning_embinit.init.transplant.transplant import TransplantOptions, transplant_tokenizer

__all__ = [
    "DEFAULT_MATCH",
    "MATCH_KINDS",
    "METHODS",
    "TransplantOptions",
    "TransplantPlan",
    "VocabularyMatch",
    "format_transplant_report",
    "match_vocabularies",
    "orthogonal_matching_pursuit",
    "resolve_method",
    "sparsemax",
    "transplant_metrics",
    "transplant_tokenizer",
]
