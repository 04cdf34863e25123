"""The shared data the benchmarks read: its folder (``EMBINIT_SHARED_DATA``, else ``../shared/data`` beside the
repository, as the tests find it) and a file of it that must be there."""

from __future__ import annotations

import os
from pathlib import Path


def shared_data_folder() -> Path:
    return Path(
        os.environ.get("EMBINIT_SHARED_DATA", Path(__file__).resolve().parent.parent.parent / "shared" / "data")
    )


def shared_file(*parts: str) -> str:
    """A file of the shared data folder; a missing one ends the benchmark with the folder and the variable named."""
    path = shared_data_folder().joinpath(*parts)
    if not path.is_file():
        raise SystemExit(
            f"{'/'.join(parts)} is not in the shared data folder {shared_data_folder()}: "
            "set EMBINIT_SHARED_DATA to the folder that holds it"
        )
    return str(path)
