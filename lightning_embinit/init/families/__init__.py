"""Model families the package recognizes inside a LightningModule, and what each says about its token tables."""

from lightning_embinit.init.families import decoders, hugging_face  # noqa: F401  (they register their families)
from lightning_embinit.init.families.base import FAMILIES, Family, TokenTable, family_of, join, recognized_models

__all__ = ["FAMILIES", "Family", "TokenTable", "family_of", "join", "recognized_models"]
