"""What a callback publishes at the end of fit for whoever records the run (a study's trial record)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

MONITORS = "monitors"
"""The ``summary_key`` of a monitor: its values merge with the other monitors' (one report column per name)."""


@runtime_checkable
class PublishesSummary(Protocol):
    """A callback whose ``summary()``, read at the end of fit, is recorded under ``summary_key``.

    Under :data:`MONITORS` the summary is flat, ``name → value`` (a number, or None when not measured), named as
    the callback logs them; under any other key it is a section of its own (a study's record holds it there).
    """

    summary_key: str

    def summary(self) -> dict[str, Any]: ...
