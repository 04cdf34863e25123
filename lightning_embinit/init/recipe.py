"""What a user asks for one slot: a source, transforms, and whether the table trains."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any

from lightning_embinit.checks import choice_error
from lightning_embinit.init.schemes import RandomScheme
from lightning_embinit.init.sources.base import EmbeddingSource, resolve_source
from lightning_embinit.init.transforms import StatisticsTarget, Transform, build_transform

Trainable = bool | str
TRAINABLE_CHOICES: tuple[Trainable, ...] = (True, False, "pretrained_rows")
_NOMINAL_SHAPE = (1 << 16, 1 << 16)
"""The shape ``check`` validates against before the table is known: wide, so that no width-bound argument fails."""
_SETS_MEAN_AND_STD = ("standardize", "match")


@dataclass(frozen=True)
class InitRecipe:
    """How one embedding table is born: a source, transforms in a fixed order, and whether the table trains.

    The source fills the table; then the ``transforms`` list runs, then ``match`` (Xavier_Pre-trained),
    ``standardize`` (Pre-trained_Xavier), ``shuffle`` (Pre-trained_Shuffled) and ``scale`` in that order (Kim et al.,
    "Initializing Transformers with Pre-trained Embeddings", §3.4; the formulas are in ``docs/concepts.md``). These
    Args are also the help of ``EmbeddingInitCallback``'s options under ``embinit fit --help``.

    Args:
        source: a random scheme (``"xavier"``, ``"normal:0.01"``, ...), a pre-trained source name (``"bert"``,
            ``"glove"``, ``"hf:<dir>"``, ...) or an ``EmbeddingSource`` object.
        source_options: keyword options of a pre-trained source (``{"oov": "match"}``, ...).
        standardize: move the table onto a target's mean and std (Pre-trained_Xavier): a scheme name, a std, a
            ``(mean, std)`` pair, a source name or a matrix.
        match: move the table onto a reference source's statistics (Xavier_Pre-trained).
        shuffle: permute rows and columns (Pre-trained_Shuffled).
        scale: multiply the table by a constant.
        transforms: an ordered list of ``"name[:argument]"`` steps, run before the keywords' steps: ``center``,
            ``remove_top[:k]`` (all-but-the-top), ``whiten[:eps]``, ``standardize:<target>``, ``match:<source>``,
            ``shuffle``, ``scale:<factor>`` (refused when it sets the mean and std and a keyword sets them again).
        trainable: ``True``; ``False`` freezes the table (and any output layer tied to it); ``"pretrained_rows"``
            freezes only the rows a pre-trained source filled, by masking their gradient.
        match_options: options of the reference source named by ``match`` (``{"project": "pca"}``, ...).
        standardize_options: options of the reference source named by ``standardize``.
        cache_dir: where every source of the recipe (the main one and references) caches parsed vector files;
            else a file source's own ``cache_dir`` option, then ``$EMBINIT_CACHE_DIR``.
    """

    source: str | EmbeddingSource | RandomScheme = "xavier"
    source_options: Mapping[str, Any] | None = None
    standardize: StatisticsTarget | None = None
    match: StatisticsTarget | None = None
    shuffle: bool = False
    scale: float | None = None
    transforms: Sequence[str] | None = None
    trainable: Trainable = True
    match_options: Mapping[str, Any] | None = None
    standardize_options: Mapping[str, Any] | None = None
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        for name in ("source_options", "match_options", "standardize_options"):
            object.__setattr__(self, name, dict(getattr(self, name) or {}))
        if self.cache_dir is not None:
            object.__setattr__(self, "cache_dir", os.fspath(self.cache_dir))

    def updated(self, overrides: Mapping[str, Any] | None, *, where: str = "slot options") -> InitRecipe:
        """A copy with ``overrides`` applied; unknown option names raise ``ValueError``."""
        if not overrides:
            return self
        names = [f.name for f in fields(self)]
        if unknown := sorted(set(overrides) - set(names)):
            raise ValueError(f"unknown {where} {unknown}; valid options: {', '.join(names)}")
        return replace(self, **dict(overrides))

    @cached_property
    def resolved_source(self) -> EmbeddingSource:
        """The source object, resolved once per recipe, so slots sharing a recipe share its caches."""
        return resolve_source(self.source, **self.source_options)

    def cache_directory(self) -> str | None:
        """The one cache directory of this recipe's sources: ``cache_dir``, else the main source's own."""
        return self.cache_dir or getattr(self.resolved_source, "cache_dir", None)

    def __getstate__(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if key != "resolved_source"}  # resolved again

    def steps(self) -> list[Transform]:
        """The transform steps in the order they run: the ``transforms`` list first, then the keywords' steps
        (match, standardize, shuffle, scale), so ``transforms=["remove_top"], standardize="xavier"`` removes the
        shared directions, then standardizes."""
        if self.standardize is not None and self.match is not None:
            raise ValueError(
                "contradictory options: 'standardize' and 'match' both set the table's mean and std; choose one"
            )
        keyword_steps: list[Transform] = []
        for name in ("match", "standardize"):
            target, options = getattr(self, name), getattr(self, f"{name}_options")
            if target is not None:
                keyword_steps.append(build_transform(name, target, **options))
            elif options:
                raise ValueError(f"{name}_options are given but {name}= is not set")
        if not isinstance(self.shuffle, bool):
            raise ValueError(f"'shuffle' is True or False, got {self.shuffle!r}")
        if self.shuffle:
            keyword_steps.append(build_transform("shuffle"))
        if self.scale is not None:
            keyword_steps.append(build_transform("scale", self.scale))
        return [*self._listed_steps(keyword_steps), *keyword_steps]

    def _listed_steps(self, keyword_steps: Sequence[Transform]) -> list[Transform]:
        """The ``transforms`` list's steps; refused where a keyword's step would undo one of them (both set the
        table's mean and std: the listed one would have no effect)."""
        if self.transforms is None:
            return []
        if isinstance(self.transforms, str):
            raise ValueError(
                f"'transforms' is a list of specs such as ['remove_top', 'shuffle'], got {self.transforms!r}"
            )
        listed = [build_transform(spec) for spec in self.transforms]
        keyword = next((step.name for step in keyword_steps if step.name in _SETS_MEAN_AND_STD), None)
        overridden = [step.describe() for step in listed if step.name in _SETS_MEAN_AND_STD]
        if keyword and overridden:
            raise ValueError(
                f"contradictory options: transforms={list(self.transforms)!r} sets the table's mean and std with "
                f"{', '.join(overridden)}, and {keyword}= sets them again afterwards (the list runs first); "
                f"keep one of them"
            )
        return listed

    def check(self, *, slot: str = "") -> None:
        """The checks that need no table: names, arguments and contradictions (shape checks come at ``validate``)."""
        self.validate(*_NOMINAL_SHAPE, slot=slot)

    def validate(self, num_embeddings: int, embedding_dim: int, *, slot: str = "") -> EmbeddingSource:
        """Check every option against an N×D table without touching any weight; return the source."""
        where = f"slot {slot!r}: " if slot else ""
        try:
            source = self.resolved_source
            for step in self.steps():
                step.validate(num_embeddings, embedding_dim)
            if not (isinstance(self.trainable, bool) or self.trainable == "pretrained_rows"):
                raise choice_error("trainable=", self.trainable, TRAINABLE_CHOICES)
        except ValueError as error:
            raise ValueError(f"{where}{error}") from None
        if self.trainable == "pretrained_rows" and not source.is_pretrained:
            raise ValueError(
                f"{where}contradictory options: trainable='pretrained_rows' freezes rows taken from a pre-trained "
                f"source, but source {source.name!r} is a random scheme with none; "
                "use trainable=False to freeze the table"
            )
        return source
