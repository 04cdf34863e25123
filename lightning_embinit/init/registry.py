"""Name → factory registries for the things users select by name (schemes, sources, transforms).

A spec is the string a user types: a plain name (``"xavier"``) or a name with an argument after the first colon
(``"normal:0.01"``, ``"hf:/models/bert"``). A factory registered with ``takes_argument=True`` receives it as its first
positional parameter; prefixes are matched before plain names so paths with colons survive. With
``optional_argument=True`` as well, the plain name is valid too and calls the factory without it
(``"remove_top"`` and ``"remove_top:3"``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

#: The type of the objects a registry holds.
T = TypeVar("T")


@dataclass(frozen=True)
class _Entry(Generic[T]):
    factory: Callable[..., T]
    takes_argument: bool
    summary: str
    optional_argument: bool = False


class Registry(Generic[T]):
    """A mapping from user-facing names to factories, failing loudly on unknown names."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, _Entry[T]] = {}

    def register(
        self, name: str, *, takes_argument: bool = False, summary: str = "", optional_argument: bool = False
    ) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """Decorator registering ``factory`` under ``name``."""

        def decorator(factory: Callable[..., T]) -> Callable[..., T]:
            self.add(name, factory, takes_argument=takes_argument, summary=summary, optional_argument=optional_argument)
            return factory

        return decorator

    def add(
        self,
        name: str,
        factory: Callable[..., T],
        *,
        takes_argument: bool = False,
        summary: str = "",
        optional_argument: bool = False,
    ) -> None:
        """Register ``factory`` under ``name``; ``optional_argument`` (with ``takes_argument``): the plain name too."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        if optional_argument and not takes_argument:
            raise ValueError(f"{self.kind} {name!r}: an optional argument needs takes_argument=True")
        if not summary and factory.__doc__:
            summary = factory.__doc__.strip().splitlines()[0]
        self._entries[name] = _Entry(factory, takes_argument, summary, optional_argument)

    def split(self, spec: str) -> tuple[str, str | None]:
        """Split ``spec`` into (registered name, argument or None); unknown names raise."""
        if not isinstance(spec, str) or not spec:
            raise ValueError(f"a {self.kind} must be given by a non-empty name; known {self.kind}s: {self.known()}")
        if spec in self._entries and (not (entry := self._entries[spec]).takes_argument or entry.optional_argument):
            return spec, None
        name, _, argument = spec.partition(":")
        entry = self._entries.get(name)
        if entry is None:
            raise ValueError(f"unknown {self.kind} {spec!r}; known {self.kind}s: {self.known()}")
        if not entry.takes_argument:
            raise ValueError(
                f"{self.kind} {name!r} takes no argument, got {spec!r}; known {self.kind}s: {self.known()}"
            )
        if not argument:
            raise ValueError(f"{self.kind} {name!r} needs an argument, as in {name}:<value>")
        return name, argument

    def build(self, spec: str, *args: Any, **kwargs: Any) -> T:
        """Instantiate the entry named by ``spec`` (``name`` or ``name:argument``)."""
        name, argument = self.split(spec)
        factory = self._entries[name].factory
        return factory(*args, **kwargs) if argument is None else factory(argument, *args, **kwargs)

    def create(self, name: str, *args: Any, **kwargs: Any) -> T:
        """Instantiate entry ``name`` with Python arguments (for values that are not strings)."""
        entry = self._entries.get(name)
        if entry is None:
            raise ValueError(f"unknown {self.kind} {name!r}; known {self.kind}s: {self.known()}")
        if args and not entry.takes_argument:
            raise ValueError(f"{self.kind} {name!r} takes no argument; known {self.kind}s: {self.known()}")
        return entry.factory(*args, **kwargs)

    def __contains__(self, spec: object) -> bool:
        try:
            self.split(spec)
        except ValueError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def known(self) -> str:
        """The registered names as users type them, comma-separated."""
        return ", ".join(
            f"{n}[:<arg>]" if e.optional_argument else f"{n}:<arg>" if e.takes_argument else n
            for n, e in sorted(self._entries.items())
        )

    def describe(self) -> dict[str, str]:
        """Name → one-line summary, for docs and ``--help``."""
        return {n: e.summary for n, e in sorted(self._entries.items())}
