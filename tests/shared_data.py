"""The one way tests find ``../shared/data``: ``EMBINIT_SHARED_DATA``, defaulting to ``../shared/data``.

Missing data skips the test with the reason, except under ``CI=true`` where it fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_data_dir() -> Path:
    configured = os.environ.get("EMBINIT_SHARED_DATA")
    return Path(configured).expanduser() if configured else (_REPO_ROOT.parent / "shared" / "data")


def require_shared_data(*relative: str) -> Path:
    """The path of ``relative`` under the shared data dir; skip (or fail under CI) when it is missing."""
    path = shared_data_dir().joinpath(*relative)
    if not path.exists():
        reason = (
            f"shared data {path} is missing: set EMBINIT_SHARED_DATA to the shared/data directory "
            "(see ../shared/README.md)"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return path
