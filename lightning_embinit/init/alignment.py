"""The former home of vocabulary alignment, kept so that ``from lightning_embinit.init.alignment import ...``
still works.

Alignment lives in :mod:`lightning_embinit.init.sources.alignment` (options, gathering, OOV fill,
coverage) and :mod:`lightning_embinit.init.sources.matching` (the matching rules);
:class:`VectorTable` in :mod:`lightning_embinit.init.sources.base`.
"""

from lightning_embinit.init.sources.alignment import (
    OOV_POLICIES,
    AlignmentOptions,
    align_to_slot,
    finite_rows,
    require_tokens,
)
from lightning_embinit.init.sources.base import VectorTable
from lightning_embinit.init.sources.matching import (
    FALLBACK_RULES,
    ROLE_CANDIDATES,
    Match,
    lower_case_index,
    match_tokens,
)

__all__ = [
    "FALLBACK_RULES",
    "OOV_POLICIES",
    "ROLE_CANDIDATES",
    "AlignmentOptions",
    "Match",
    "VectorTable",
    "align_to_slot",
    "finite_rows",
    "lower_case_index",
    "match_tokens",
    "require_tokens",
]
