"""Opening possibly compressed vector files: gzip, bz2, xz or a single-file zip, by magic bytes."""

from __future__ import annotations

import bz2
import gzip
import lzma
import zipfile
import zlib
from typing import IO

# What a truncated or corrupt gzip, bz2, xz or zip stream raises while it is read.
DECOMPRESSION_ERRORS = (EOFError, zipfile.BadZipFile, lzma.LZMAError, gzip.BadGzipFile, zlib.error)
_ZIP_MAGIC = b"PK\x03\x04"
_STREAMS = {b"\x1f\x8b": lambda raw: gzip.GzipFile(fileobj=raw), b"BZh": bz2.BZ2File, b"\xfd7zXZ\x00": lzma.LZMAFile}


def is_compressed(path: str) -> bool:
    """Whether ``path`` starts with the magic bytes of gzip, bz2, xz or zip."""
    with open(path, "rb") as handle:
        return handle.read(6).startswith((*_STREAMS, _ZIP_MAGIC))


def open_decompressed(path: str) -> tuple[IO[bytes], IO[bytes]]:
    """``(stream, raw)``: the decompressed byte stream of ``path`` and the raw file (for progress)."""
    raw = open(path, "rb")
    magic = raw.read(6)
    raw.seek(0)
    for prefix, opener in _STREAMS.items():
        if magic.startswith(prefix):
            return opener(raw), raw
    if magic.startswith(_ZIP_MAGIC):
        try:
            archive = zipfile.ZipFile(raw)
        except (zipfile.BadZipFile, EOFError, OSError) as error:
            raw.close()
            raise ValueError(f"{path}: not a readable zip archive (truncated or corrupt?): {error}") from None
        members = [info for info in archive.infolist() if not info.is_dir()]
        if len(members) != 1:
            raw.close()
            names = [info.filename for info in members]
            raise ValueError(
                f"{path}: a zip archive with {len(names)} files {names[:6]}; unzip it and point at one file"
            )
        return archive.open(members[0]), raw
    return raw, raw


def read_head(path: str, size: int = 1 << 16) -> bytes:
    """The first ``size`` decompressed bytes of ``path``."""
    stream, raw = open_decompressed(path)
    try:
        return stream.read(size)
    except DECOMPRESSION_ERRORS as error:
        raise ValueError(f"{path}: the compressed file is truncated or corrupt: {error}") from None
    finally:
        stream.close()
        raw.close()
