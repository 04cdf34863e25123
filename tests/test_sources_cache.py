"""The parse-once vector cache: odd tokens, checked entries, file identity, stale staging, warnings on a hit."""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest

from lightning_embinit.init.sources import static, vector_cache
from lightning_embinit.init.sources.vector_file import TextVectorParser


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EMBINIT_OFFLINE", "1")
    return tmp_path / "cache" / "vectors"


@pytest.fixture
def parses(monkeypatch):
    """The paths parsed so far (a cache hit parses nothing)."""
    calls: list[str] = []
    original = TextVectorParser.parse

    def counting(self, sink):
        calls.append(self.path)
        return original(self, sink)

    monkeypatch.setattr(TextVectorParser, "parse", counting)
    return calls


def open_table(path, **options):
    return static.open_vector_file(str(path), static.FileVectorsOptions(progress=False, **options))


def test_token_with_a_carriage_return_survives_the_cache(tmp_path, parses):
    path = tmp_path / "cr.txt"
    path.write_bytes(b"the 1 2 3\na\rb 4 5 6\ncat 7 8 9\n")
    expected = ["the", "a\rb", "cat"]
    assert list(open_table(path, cache=False).tokens) == expected
    for _ in range(2):  # the miss, then the hit
        table = open_table(path)
        assert list(table.tokens) == expected and table.lookup()["a\rb"] == 1
        assert table.gather([1]).tolist() == [[4.0, 5.0, 6.0]]
    assert len(parses) == 2


def test_an_entry_is_checked_before_it_is_renamed_into_place(tmp_path, isolated_cache):
    path = tmp_path / "v.txt"
    path.write_text("a 1\nb 2\nc 3\n")

    def inconsistent(open_sink):  # three rows but two tokens
        open_sink(1)(np.ones((3, 1), np.float32))
        return ["a", "b"], {}

    with pytest.raises(ValueError, match="corrupt vector cache entry.*2 tokens for 3 rows"):
        vector_cache.load_or_build(path, {}, inconsistent)
    assert list(isolated_cache.iterdir()) == []


def replace_keeping_size_and_mtime(path, text):
    """Write ``text`` (same length as the file) to a copy with the original's times, renamed over ``path``."""
    assert len(text) == os.path.getsize(path)
    copy = path.with_name(path.name + ".new")
    copy.write_text(text)
    shutil.copystat(path, copy)
    os.replace(copy, path)


def test_a_replaced_file_with_the_same_size_and_mtime_is_parsed_again(tmp_path, parses):
    path = tmp_path / "v.txt"
    path.write_text("a 1\nb 2\n")
    assert open_table(path).gather([0, 1]).tolist() == [[1.0], [2.0]]
    mtime = os.stat(path).st_mtime_ns
    replace_keeping_size_and_mtime(path, "a 3\nb 4\n")  # a new inode
    assert os.stat(path).st_mtime_ns == mtime
    assert open_table(path).gather([0, 1]).tolist() == [[3.0], [4.0]]
    time.sleep(0.05)  # the status-change clock ticks coarsely
    (tmp_path / "other.txt").write_text("a 5\nb 6\n")
    shutil.copystat(path, tmp_path / "other.txt")
    shutil.copy2(tmp_path / "other.txt", path)  # written in place (same inode), mtime preserved
    assert os.stat(path).st_mtime_ns == mtime
    assert open_table(path).gather([0, 1]).tolist() == [[5.0], [6.0]]
    assert len(parses) == 3


def test_stale_staging_directories_are_removed_when_an_entry_is_built(tmp_path, isolated_cache):
    isolated_cache.mkdir(parents=True)
    stale = isolated_cache / "0123.tmp.dead"
    fresh = isolated_cache / "4567.tmp.live"
    for directory in (stale, fresh):
        directory.mkdir()
        (directory / "matrix.npy").write_bytes(b"partial")
    two_hours_ago = time.time() - 7200
    for item in (stale / "matrix.npy", stale):
        os.utime(item, (two_hours_ago, two_hours_ago))
    old_dir_new_file = isolated_cache / "89ab.tmp.writing"  # a long parse still writing its matrix
    old_dir_new_file.mkdir()
    (old_dir_new_file / "matrix.npy").write_bytes(b"growing")
    os.utime(old_dir_new_file, (two_hours_ago, two_hours_ago))
    path = tmp_path / "v.txt"
    path.write_text("a 1\n")
    open_table(path)
    assert not stale.exists() and fresh.exists() and old_dir_new_file.exists()
    assert len([p for p in isolated_cache.iterdir() if ".tmp." not in p.name]) == 1


def test_parse_warnings_are_repeated_on_a_cache_hit(tmp_path, parses):
    path = tmp_path / "v.txt"
    path.write_bytes(b"5 2\ncaf\xe9 1 2\nbad 1\ncat 3 4\n")
    for _ in range(2):
        with pytest.warns(UserWarning) as caught:
            table = open_table(path, on_bad_line="warn")
        messages = [str(w.message) for w in caught]
        assert any("announces 5 vectors but the file has 3" in m for m in messages)
        assert any("skipped 1 bad line" in m for m in messages)
        assert any("1 token(s) with invalid UTF-8" in m for m in messages)
        assert len(table.tokens) == 2
    assert len(parses) == 1
