"""Where a Hugging Face model's files come from: a local directory, the hub cache, or a download.

A hub model's files are looked up in the Hugging Face cache first. A file the cache lacks is
downloaded while the hub can be used; when it cannot — an offline flag, ``huggingface_hub``'s
offline mode, an endpoint that does not answer (:mod:`.network`), or a download that failed to
connect — the model is read from the cache only, and a missing file is simply absent (``None``),
so a cached single-file model works without a network although its (absent) index is asked for.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from lightning_embinit.init.sources import network


def local_fetch(directory: str) -> Callable[[str], str | None]:
    """``fetch(filename)``: the file's path in ``directory``, or None."""

    def fetch(filename: str) -> str | None:
        path = os.path.join(directory, filename)
        return path if os.path.isfile(path) else None

    return fetch


def hub_offline_reason() -> str | None:
    """Why the hub cannot be used now (an offline flag or an unreachable endpoint), else None."""
    from huggingface_hub import constants

    if network.offline_flag() is None and constants.HF_HUB_OFFLINE:
        return "huggingface_hub is in offline mode"
    return network.offline_reason(constants.ENDPOINT)


class HubFiles:
    """``fetch(filename)`` for a hub model: the cached file, else a download while the hub is usable, else None.

    ``offline`` says why nothing is downloaded (None while downloads are possible); it is
    decided at the first file the cache lacks, or by :meth:`offline_reason`.
    """

    def __init__(
        self, repo_ids: Sequence[str], *, revision: str | None, cache_dir: str | None, subfolder: str | None
    ) -> None:
        self.repo_ids, self.revision, self.cache_dir, self.subfolder = tuple(repo_ids), revision, cache_dir, subfolder
        self.offline: str | None = None
        self._decided = False

    def offline_reason(self) -> str | None:
        if not self._decided:
            self.offline, self._decided = hub_offline_reason(), True
        return self.offline

    def cached(self, filename: str) -> str | None:
        """The cached copy of ``filename`` under any of the repository ids, or None."""
        from huggingface_hub import try_to_load_from_cache

        name = f"{self.subfolder}/{filename}" if self.subfolder else filename
        for repo_id in self.repo_ids:
            found = try_to_load_from_cache(repo_id, name, cache_dir=self.cache_dir, revision=self.revision)
            if isinstance(found, str):
                return found
        return None

    def __call__(self, filename: str) -> str | None:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

        cached = self.cached(filename)
        if cached is not None or self.offline_reason() is not None:
            return cached
        repo_id = self.repo_ids[0]
        try:
            return hf_hub_download(
                repo_id, filename, subfolder=self.subfolder, revision=self.revision, cache_dir=self.cache_dir
            )
        except LocalEntryNotFoundError as error:  # no connection and no cached copy: go on from the cache
            self.offline = f"downloading from the hub failed ({error})"
            return None
        except EntryNotFoundError:  # the repository has no such file
            return None
        except Exception as error:  # noqa: BLE001 - auth and server errors
            raise RuntimeError(
                f"downloading {filename} of {repo_id!r} from the Hugging Face hub failed: {error}"
            ) from error
