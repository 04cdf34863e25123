"""Well-known static vector sets by name (``glove``, ``glove-6B-<dim>``, ``word2vec``, ``fasttext``, the gensim-data
names), read as ``file:<path>`` (:mod:`.static`) from ``path=``, else gensim-data's local copy or download.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial
from typing import Any

from lightning_embinit.init.sources import network
from lightning_embinit.init.sources.base import SOURCES
from lightning_embinit.init.sources.pretrained import PretrainedSource
from lightning_embinit.init.sources.static import named_file_source


@dataclass(frozen=True)
class WellKnown:
    """A published vector set: where gensim-data has it (if it does) and where to get it by hand."""

    title: str
    gensim_name: str | None
    file_name: str
    url: str
    dim: int
    summary: str = ""

    def locate(self, name: str) -> str:
        """The set's local file (gensim-data's copy, downloaded when a network is reachable); else how to get it."""
        how = (
            f"download {self.file_name} from {self.url} (unzip if needed) and pass "
            f"source='file:/path/to/{self.file_name}' or source_options={{'path': '/path/to/{self.file_name}'}}"
        )
        if self.gensim_name is None:
            raise RuntimeError(f"source {name!r} ({self.title}) is not downloaded automatically: {how}")
        try:
            return gensim_data_path(self.gensim_name)
        except RuntimeError as error:
            raise RuntimeError(f"source {name!r} ({self.title}): {error}. Without a network, {how}") from None


_GLOVE_6B = "https://nlp.stanford.edu/data/glove.6B.zip"
WELL_KNOWN: dict[str, WellKnown] = {
    "glove": WellKnown(
        "GloVe Common Crawl 840B, 300d",
        None,
        "glove.840B.300d.txt",
        "https://nlp.stanford.edu/data/glove.840B.300d.zip",
        300,
    ),
    **{
        f"glove-6B-{d}": WellKnown(
            f"GloVe 6B (Wikipedia+Gigaword), {d}d", f"glove-wiki-gigaword-{d}", f"glove.6B.{d}d.txt", _GLOVE_6B, d
        )
        for d in (50, 100, 200, 300)
    },
    "word2vec": WellKnown(
        "word2vec Google News, 300d",
        "word2vec-google-news-300",
        "GoogleNews-vectors-negative300.bin.gz",
        "https://code.google.com/archive/p/word2vec/",
        300,
    ),
    "fasttext": WellKnown(
        "fastText English wiki-news subword, 300d",
        "fasttext-wiki-news-subwords-300",
        "wiki-news-300d-1M-subword.vec.zip",
        "https://dl.fbaipublicfiles.com/fasttext/vectors-english/wiki-news-300d-1M-subword.vec.zip",
        300,
    ),
}
GENSIM_DATA = {
    **{f"glove-wiki-gigaword-{d}": d for d in (50, 100, 200, 300)},
    **{f"glove-twitter-{d}": d for d in (25, 50, 100, 200)},
    "word2vec-google-news-300": 300,
    "fasttext-wiki-news-subwords-300": 300,
    "conceptnet-numberbatch-17-06-300": 300,
}
for _name, _dim in GENSIM_DATA.items():
    WELL_KNOWN[_name] = WellKnown(
        f"gensim-data {_name}, {_dim}d",
        _name,
        f"{_name}.gz",
        "https://github.com/RaRe-Technologies/gensim-data",
        _dim,
        f"gensim-data {_name} ({_dim}d), through gensim.downloader or path=",
    )

GENSIM_DATA_HOST = "https://raw.githubusercontent.com"  # where gensim.downloader reads its catalogue


def gensim_data_path(gensim_name: str) -> str:
    """The local gensim-data copy of ``gensim_name``, downloading it when a network is reachable."""
    base = os.environ.get("GENSIM_DATA_DIR") or os.path.expanduser("~/gensim-data")
    folder = os.path.join(base, gensim_name)
    if os.path.isdir(folder):
        files = sorted(
            f for f in os.listdir(folder) if not f.endswith((".json", ".py", ".txt.tmp")) and f != "__init__.py"
        )
        preferred = [f for f in files if f.startswith(gensim_name)]
        if preferred or files:
            return os.path.join(folder, (preferred or files)[0])
    reason = network.offline_reason(GENSIM_DATA_HOST)
    if reason is not None:
        raise RuntimeError(f"gensim-data {gensim_name!r} is not in {base} and cannot be downloaded: {reason}")
    import gensim.downloader

    try:
        return str(gensim.downloader.load(gensim_name, return_path=True))
    except Exception as error:  # noqa: BLE001 - network and server errors surface as many types
        raise RuntimeError(f"downloading gensim-data {gensim_name!r} failed: {error}") from error


def _register(name: str, entry: WellKnown) -> None:
    def factory(**options: Any) -> PretrainedSource:
        return named_file_source(name, options, partial(entry.locate, name), entry.dim)

    summary = entry.summary or f"{entry.title}; local file with path=, else gensim-data {entry.gensim_name or '(none)'}"
    SOURCES.add(name, factory, summary=summary)


for _name, _entry in WELL_KNOWN.items():
    _register(_name, _entry)
