"""The package's one YAML reader: a key given twice in one mapping (YAML would keep only the last), a syntax error, a
binary file or a directory is an error naming the file (and the line), never a setting silently dropped or a
traceback. Like :mod:`lightning_embinit.checks`, it imports nothing from the package."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

MERGE_TAG = "tag:yaml.org,2002:merge"


def load_yaml(text: str, name: str, load: Callable[[str], Any] = yaml.safe_load) -> Any:
    """``load(text)``, after a yaml.YAMLError naming the file ``name``, the line and the key when a mapping of
    ``text`` gives a key twice (a key given again after a ``<<`` merge is an override, not a repeat), or when
    ``text`` is not valid YAML."""
    stream = io.StringIO(text)
    stream.name = name  # the file the parser's messages name
    loader = yaml.SafeLoader(stream)
    try:
        pending, seen = [loader.get_single_node()], set()
    finally:
        loader.dispose()
    while pending:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            pending.extend(node.value)
        if not isinstance(node, yaml.MappingNode):
            continue
        first: dict[tuple[str, str], yaml.Node] = {}
        for key, value in node.value:
            pending.append(value)
            if isinstance(key, yaml.ScalarNode) and key.tag != MERGE_TAG:
                earlier = first.setdefault((key.tag, key.value), key)
                if earlier is not key:
                    raise yaml.constructor.ConstructorError(
                        problem=f"key {key.value!r} is given a second time (first on line {earlier.start_mark.line + 1}"
                        "); YAML would keep only the last value: remove or rename one",
                        problem_mark=key.start_mark,
                    )
    return load(text)


def read_yaml(path: str | Path, what: str) -> Any:
    """The data in the YAML file ``path``; a ValueError naming ``what`` and the path when it does not exist, is a
    directory, is not UTF-8 text (binary?) or is not valid YAML (a key given twice included)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path} is a directory; give the YAML file in it")
    if not path.is_file():
        raise ValueError(f"{what} {path} does not exist")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{what} {path} is not a text file (binary?): byte {error.start} is not UTF-8; give a UTF-8 YAML file"
        ) from None
    if "\x00" in text:
        raise ValueError(f"{what} {path} is not a text file (binary?): it holds NUL bytes; give a UTF-8 YAML file")
    try:
        return load_yaml(text, str(path))
    except yaml.YAMLError as error:
        reason = "; ".join(line.strip() for line in str(error).splitlines())
        raise ValueError(f"{what} {path} is not valid YAML: {reason}") from None
