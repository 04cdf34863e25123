"""The one way the package opens a checkpoint file: checked, loaded, and every failure named.

torch's zip reader does not check CRC-32s, so a checkpoint with flipped bytes inside a tensor loads with different
weights: :func:`load_checkpoint_file` first verifies every member's CRC (:func:`verify_archive`; by hand,
``zipfile.ZipFile(path).testzip()``), then loads it; a missing, empty, truncated or damaged file, or one that is no
checkpoint, is a ValueError naming the file. :func:`saved_class` names the class that saved a checkpoint, when it says.
"""

from __future__ import annotations

import os
import pickle
import zipfile
import zlib
from collections.abc import Mapping
from typing import Any

import torch

CLASS_KEY = "embinit_class"
"""The checkpoint key under which the package's systems record their class (``module.QualifiedName``)."""
ZIP_MAGIC = b"PK\x03\x04"


class UnsafeCheckpointError(ValueError):
    """A checkpoint that holds objects beyond tensors and plain data, refused under ``weights_only=True``."""


def checked_file(path: str | os.PathLike[str], label: str) -> str:
    """``path``, ``~`` expanded, when it names a file; else a ValueError that starts with ``label``:
    ``<label> is a directory, not a checkpoint file`` (naming the checkpoints inside) or ``<label>: no such file``."""
    path = os.path.expanduser(os.fspath(path))
    if os.path.isdir(path):
        inside = sorted(name for name in os.listdir(path) if name.endswith(".ckpt"))
        hint = f" (it holds {', '.join(inside[:5])}{', …' if len(inside) > 5 else ''})" if inside else ""
        raise ValueError(f"{label} is a directory, not a checkpoint file: name a checkpoint file inside it{hint}")
    if not os.path.isfile(path):
        raise ValueError(f"{label}: no such file")
    return path


def verify_archive(path: str, what: str = "checkpoint") -> bool:
    """Check the CRC-32 of every member of a zip-format (torch ≥ 1.6) checkpoint: True when verified; False for a
    file that is not a zip archive (a legacy pickle checkpoint, or no checkpoint: :func:`torch.load` tells). A
    truncated or damaged archive is a ValueError naming the file."""
    with open(path, "rb") as handle:
        head = handle.read(len(ZIP_MAGIC))
    if not head:
        raise ValueError(f"{what} {path} is empty (0 bytes): the save or the copy did not finish")
    if head != ZIP_MAGIC:
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, EOFError, zlib.error, OSError) as error:
        raise ValueError(
            f"{what} {path} is truncated or damaged (its zip archive cannot be read: {error}); the save "
            "or the copy was cut short — copy or save it again"
        ) from None
    if damaged is not None:
        raise ValueError(
            f"{what} {path} is damaged: {damaged!r} inside it fails its CRC check (the bytes changed after "
            "the file was written: a bad copy or disk); copy or save it again"
        )
    return True


def load_checkpoint_file(
    path: str | os.PathLike[str],
    *,
    what: str = "checkpoint",
    weights_only: bool = True,
    mapped: list[bool] | None = None,
    trust_hint: str = "load it with weights_only=False",
) -> Any:
    """What :func:`torch.load` reads from ``path`` (on the CPU; memory-mapped when the format allows), after
    :func:`verify_archive`. ``mapped`` (a list) gets ``True`` appended when the file was memory-mapped. Every failure
    is a ValueError that starts with ``<what> <path>``; ``trust_hint``: how the caller's user loads a file of objects
    beyond tensors (refused under ``weights_only``)."""
    path = os.path.expanduser(os.fspath(path))
    checked_file(path, f"{what} {path}")
    is_zip = verify_archive(path, what)
    try:
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=weights_only, mmap=is_zip)
            if mapped is not None and is_zip:
                mapped.append(True)
        except RuntimeError as error:
            if "mmap" not in str(error) and "zip" not in str(error):
                raise
            loaded = torch.load(path, map_location="cpu", weights_only=weights_only)
    except Exception as error:  # noqa: BLE001 - unpickling errors come in many types
        message = f"{what} {path} cannot be loaded: {type(error).__name__}: {str(error)[:300]}."
        if weights_only and isinstance(error, pickle.UnpicklingError) and "Weights only load failed" in str(error):
            raise UnsafeCheckpointError(
                f"{message} It holds objects other than tensors and plain data; if you trust the file, {trust_hint}."
            ) from None
        if not is_zip:
            message += " It is not a zip archive, as checkpoints of torch ≥ 1.6 are: is it a checkpoint at all?"
        raise ValueError(message) from None
    return loaded


def saved_class(checkpoint: Any) -> str | None:
    """The class path (``module.Name``) of the class that saved ``checkpoint``, when it records one."""
    if not isinstance(checkpoint, Mapping):
        return None
    recorded = checkpoint.get(CLASS_KEY)
    hparams = checkpoint.get("hyper_parameters")
    if recorded is None and isinstance(hparams, Mapping):
        recorded = hparams.get("_class_path")
    return recorded if isinstance(recorded, str) else None
