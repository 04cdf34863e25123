"""What ``embinit translate|generate|classify`` and ``embinit predict`` check before any work (the model is not yet
loaded): their parser (:class:`CommandParser`: one line on stderr and exit status 2 for a refused argument, no
abbreviations), ``--output``, ``--device`` and the input text (:func:`read_input_lines`). Nothing here imports torch
at module level: a refused argument answers at once.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from lightning_embinit.text_files import check_encoding, decode_text, split_lines

DEVICE_KINDS = ("cpu", "cuda", "cuda:N", "mps")


class CommandParser(argparse.ArgumentParser):
    """An ``argparse`` parser without abbreviations (``--ckpt`` is not ``--ckpt_path``) whose refusals are one line
    (``embinit translate: error: ...``) and exit status 2; an unknown option is named, with the closest known ones."""

    def __init__(self, **options: Any) -> None:
        super().__init__(allow_abbrev=False, **options)

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (`{self.prog} --help` lists the options)", file=sys.stderr, flush=True)
        sys.exit(2)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """The options; an unknown option is refused first, by name (argparse checks the required ones before: ``--ckpt
        x`` would say "required: --ckpt_path" without naming ``--ckpt``)."""
        args = list(sys.argv[1:] if args is None else args)
        given = args[: args.index("--")] if "--" in args else args
        unknown = [
            item for item in given if item.startswith("--") and item.split("=", 1)[0] not in self._option_string_actions
        ]
        if unknown:
            self.error(self.unknown_message(unknown))
        options, extra = self.parse_known_args(args, namespace)
        if extra:
            self.error(self.unknown_message(extra))
        return options

    def unknown_message(self, unknown: Sequence[str]) -> str:
        """ "unknown option --ckpt; did you mean --ckpt_path?" (or "unexpected argument 'x'" for a bare value)."""
        options = [item.split("=", 1)[0] for item in unknown if item.startswith("-")]
        if not options:
            return f"unexpected argument {' '.join(unknown)!r} (values follow their option)"
        owner = {option: action for action in self._actions for option in action.option_strings}
        close = [option for option in owner if option.startswith(options[0])]
        close = close or difflib.get_close_matches(options[0], list(owner), n=2, cutoff=0.7)
        named = list(dict.fromkeys(owner[option].option_strings[0] for option in close))
        hint = f"; did you mean {' or '.join(named)}?" if named else ""
        return f"unknown option{'s' if len(options) > 1 else ''} {', '.join(options)}{hint}"


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer ≥ ``minimum`` (else "expected an integer ≥ 1, got '0'")."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer ≥ {minimum}, got {text!r}")
        return value

    return parse


def non_negative_float(text: str) -> float:
    """An argparse ``type``: a finite number ≥ 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number ≥ 0, got {text!r}")
    return value


def encoding_name(text: str) -> str:
    """An argparse ``type``: a text encoding Python knows (:func:`~lightning_embinit.text_files.check_encoding`)."""
    try:
        return check_encoding(text, "--encoding")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def check_output(output: str, others: Iterable[tuple[str, str | None]]) -> None:
    """``--output`` (``-``: stdout) is a file that can be written, and not the same file as one of ``others``
    ((option, path) pairs: ``--input``, ``--ckpt_path``, ...), which writing it would destroy; else a ValueError."""
    if output == "-":
        return
    from lightning_embinit.callbacks.prediction_writer import check_output_file

    file = check_output_file(output, "--output")
    for option, other in others:
        if other in (None, "-") or not file.exists() or not os.path.exists(other):
            continue
        if os.path.samefile(file, other):
            raise ValueError(
                f"--output {output} is the same file as {option} {other}: writing it would destroy that file; "
                "choose another --output"
            )


def check_device(spec: str) -> str:
    """``--device`` as a torch device this machine has (:data:`DEVICE_KINDS`); else a ValueError saying why."""
    import torch

    try:
        device = torch.device(spec)
    except (RuntimeError, ValueError):
        raise ValueError(f"--device {spec!r} is not a device; choose {', '.join(DEVICE_KINDS)}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"--device {spec}: CUDA is not available here (no GPU, or a CPU-only torch); use --device cpu"
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ValueError(f"--device {spec}: this machine has {count} GPU(s), cuda:0 … cuda:{count - 1}")
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"--device {spec}: Apple's MPS is not available here; use --device cpu")
    elif device.type != "cpu":
        raise ValueError(f"--device {spec}: {device.type} devices are not supported; choose {', '.join(DEVICE_KINDS)}")
    return spec


def read_input_lines(source: str, encoding: str = "utf-8") -> list[str]:
    """The lines of ``--input`` (a file, or ``-``: standard input), file and stdin read alike: bytes decoded as
    ``encoding`` (a UTF-8 byte-order mark skipped; text that is not ``encoding`` is a ValueError naming the file or
    "standard input", the line and the byte), split at ``\\n`` only (a ``\\r`` before it dropped; a form feed,
    NEL or U+2028 stays inside its line); a final ``\\n`` adds no line."""
    where = "standard input" if source == "-" else f"--input {source}"
    if source == "-":
        stream = getattr(sys.stdin, "buffer", None)
        data = stream.read() if stream is not None else sys.stdin.read().encode("utf-8", "surrogateescape")
    else:
        path = Path(source)
        if path.is_dir():
            raise ValueError(f"--input {source} is a directory, not a text file")
        if not path.exists():
            raise ValueError(f"--input {source}: no such file")
        try:
            data = path.read_bytes()
        except OSError as error:
            raise ValueError(f"--input {source}: cannot be read ({error.strerror})") from None
    return split_lines(decode_text(data, where, encoding, "--encoding"))
