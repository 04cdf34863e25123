"""The argparse parsers of ``embinit inspect``, ``sweep`` and ``report`` for sphinx-argparse (docs/cli_reference.md).

sphinx-argparse reads help texts as reStructuredText; they are plain text (``examples/studies/*.yaml``), so
the characters reStructuredText would take for markup are escaped here.
"""

from __future__ import annotations

import argparse
import re

from lightning_embinit.commands import inspect as inspect_cli
from lightning_embinit.commands import study as study_cli

_MARKUP = re.compile(r"([*`|_\\])")


def _plain(text: str | None) -> str | None:
    return None if text is None else _MARKUP.sub(r"\\\1", text)


def _rst_safe(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.description = _plain(parser.description)
    for action in parser._actions:  # every argument, in every group
        action.help = _plain(action.help)
    for group in parser._action_groups:
        group.description = _plain(group.description)
    return parser


def inspect_parser() -> argparse.ArgumentParser:
    return _rst_safe(inspect_cli.build_parser())


def sweep_parser() -> argparse.ArgumentParser:
    return _rst_safe(study_cli.sweep_parser())


def report_parser() -> argparse.ArgumentParser:
    return _rst_safe(study_cli.report_parser())
