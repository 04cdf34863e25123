"""Vector-file sources: ragged spaced tokens, header override, broken archives, published widths, gensim-data."""

from __future__ import annotations

import gzip
import os
import zipfile

import pytest
import torch

from lightning_embinit.init.sources import SourceRequest, network, resolve_source, static
from lightning_embinit.init.sources.vector_file import TextVectorParser
from tests.shared_data import require_shared_data


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EMBINIT_OFFLINE", "1")


def request_for(tokens, dim):
    return SourceRequest("src", len(tokens), dim, tokens=list(tokens), generator=torch.Generator().manual_seed(0))


def parse(path, **options):
    blocks = []
    tokens = TextVectorParser(str(path), progress=False, **options).parse(blocks.append)
    return tokens, [row.tolist() for block in blocks for row in block]


def test_a_spaced_token_ending_in_a_number_is_a_bad_line_unless_allowed(tmp_path):
    path = tmp_path / "ragged.txt"
    path.write_text("the 1 2 3\nnew york 9 1 2 3\ncat 4 5 6\n")
    with pytest.raises(
        ValueError,
        match=r"ragged.txt: line 2: more than 3 values — or the token 'new york 9' has "
        r"spaces and ends in a number \(pass source_options allow_numeric_token_words=True",
    ):
        parse(path)
    with pytest.raises(ValueError, match="line 2"):
        resolve_source(f"file:{path}").build(request_for(["the"], 3))
    assert parse(path, on_bad_line="skip")[0] == ["the", "cat"]
    tokens, rows = parse(path, allow_numeric_token_words=True)
    assert tokens == ["the", "new york 9", "cat"] and rows[1] == [1, 2, 3]
    built = resolve_source(f"file:{path}", allow_numeric_token_words=True).build(request_for(["new york 9"], 3))
    assert built.weight.tolist() == [[1, 2, 3]]


def test_spaced_tokens_not_ending_in_a_number_are_kept(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("the 1 2 3\n9 to five 4 5 6\nat&t corp 7 8 9\n")
    assert parse(path)[0] == ["the", "9 to five", "at&t corp"]


def test_header_option_overrides_detection(tmp_path):
    path = tmp_path / "numbers.txt"
    path.write_text("7 1\n8 2\n9 3\n")
    with pytest.warns(UserWarning, match="announces 7 vectors"):  # detected as a word2vec header
        assert list(static.open_vector_file(str(path), static.FileVectorsOptions(progress=False)).tokens) == ["8", "9"]
    table = static.open_vector_file(str(path), static.FileVectorsOptions(header=False, progress=False))
    assert list(table.tokens) == ["7", "8", "9"] and table.gather([0, 2]).tolist() == [[1.0], [3.0]]
    assert "(glove, 3×1" in table.description
    built = resolve_source(f"file:{path}", header=False).build(request_for(["7"], 1))
    assert built.weight.tolist() == [[1.0]]
    with pytest.raises(ValueError, match="contradictory options: format='word2vec' fixes header=True"):
        resolve_source(f"file:{path}", format="word2vec", header=False)


def fds_open_on(path):
    folder = "/proc/self/fd"
    found = []
    for fd in os.listdir(folder):
        try:
            if os.readlink(os.path.join(folder, fd)) == str(path):
                found.append(fd)
        except OSError:
            continue
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_truncated_zip_raises_value_error_and_closes_the_file(tmp_path):
    path = tmp_path / "vectors.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("vectors.txt", "".join(f"w{i} {i} {i + 1}\n" for i in range(2000)))
    path.write_bytes(path.read_bytes()[: os.path.getsize(path) // 2])
    with pytest.raises(ValueError, match=r"vectors.zip: not a readable zip archive") as caught:
        resolve_source(f"file:{path}").build(request_for(["w1"], 2))
    assert caught.value is not None and fds_open_on(path) == []  # closed, though the traceback is alive


def test_truncated_gzip_raises_value_error_naming_the_file(tmp_path):
    path = tmp_path / "vectors.txt.gz"
    with gzip.open(path, "wb") as handle:
        handle.write("".join(f"w{i} {i} {i + 1}\n" for i in range(50000)).encode())
    path.write_bytes(path.read_bytes()[: os.path.getsize(path) * 2 // 3])
    with pytest.raises(ValueError, match=r"vectors.txt.gz: the compressed file is truncated or corrupt"):
        resolve_source(f"file:{path}").build(request_for(["w1"], 2))


def test_well_known_name_checks_the_published_width(tmp_path):
    path = tmp_path / "v.txt"
    path.write_text("the 1 2 3\ncat 4 5 6\n")
    with pytest.raises(
        ValueError,
        match=r"'glove-6B-100' names 100-dimensional vectors, but .*v.txt has dimension 3; "
        r"pass source='file:",
    ):
        resolve_source("glove-6B-100", path=str(path)).build(request_for(["the"], 3))
    with pytest.raises(ValueError, match="names 50-dimensional vectors"):
        resolve_source("glove-twitter-50", path=str(path)).build(request_for(["the"], 3))


def test_gensim_downloader_is_used_when_a_network_exists(tmp_path, monkeypatch):
    import gensim.downloader

    glove = require_shared_data("glove", "glove.6B.50d.multi30k_subset.txt.gz")
    monkeypatch.delenv("EMBINIT_OFFLINE")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("GENSIM_DATA_DIR", str(tmp_path / "empty-gensim-data"))
    monkeypatch.setattr(network, "unreachable", lambda url: None)  # a network exists
    asked = []

    def load(name, return_path=False):
        asked.append((name, return_path))
        return str(glove)

    monkeypatch.setattr(gensim.downloader, "load", load)
    monkeypatch.setattr(gensim.downloader, "info", lambda name=None, **_: {"file_name": "glove.gz"})
    built = resolve_source("glove-6B-50").build(request_for(["the", "cat"], 50))
    assert built.coverage.found == 2 and asked == [("glove-wiki-gigaword-50", True)]

    def failing(name, return_path=False):
        raise ConnectionError("server said no")

    monkeypatch.setattr(gensim.downloader, "load", failing)
    with pytest.raises(
        RuntimeError,
        match=r"downloading gensim-data 'word2vec-google-news-300' failed: server said no.*"
        r"source='file:",
    ):
        resolve_source("word2vec").build(request_for(["the"], 300))
