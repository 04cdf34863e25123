"""Static word vectors: file formats, messy files, the parse-once cache, well-known names (no network)."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import shutil
import warnings
import zipfile

import numpy as np
import pytest
import torch

from lightning_embinit.init.sources import SourceRequest, resolve_source, static, vector_cache, vector_file
from lightning_embinit.init.sources.vector_file import TextVectorParser
from tests.shared_data import require_shared_data

SPECIALS = {"pad": "<pad>", "unk": "<unk>", "bos": "<bos>", "eos": "<eos>"}


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBINIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EMBINIT_OFFLINE", "1")
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def glove_path():
    return require_shared_data("glove", "glove.6B.50d.multi30k_subset.txt.gz")


def request_for(tokens, dim, seed=0, corpus=None):
    return SourceRequest(
        "src",
        len(tokens),
        dim,
        tokens=list(tokens),
        special_tokens=SPECIALS,
        generator=torch.Generator().manual_seed(seed),
        corpus=corpus,
    )


def parse(path, **options):
    blocks = []
    parser = TextVectorParser(str(path), progress=False, **options)
    tokens = parser.parse(blocks.append)
    matrix = np.concatenate(blocks) if blocks else np.zeros((0, parser.dim or 0), np.float32)
    return tokens, matrix, parser.report


def write(path, text, opener=open):
    with opener(path, "wb") as handle:
        handle.write(text.encode("utf-8") if isinstance(text, str) else text)
    return path


# -- real data ----------------------------------------------------------------------------


def test_glove_subset_rows_equal_gensim(glove_path):
    from gensim.models import KeyedVectors

    kv = KeyedVectors.load_word2vec_format(str(glove_path), binary=False)
    words = ["<pad>", "<unk>", "<bos>", "<eos>"] + kv.index_to_key[:300] + ["Dog", "qqqzzz"]
    built = resolve_source(f"file:{glove_path}").build(request_for(words, 50))
    for position, word in enumerate(words[4:304], start=4):
        assert torch.equal(built.weight[position], torch.tensor(kv[word]))
    assert torch.equal(built.weight[304], torch.tensor(kv["dog"])), "lower-case fallback"
    assert built.coverage.found == 301 and built.coverage.by_rule == {"exact": 300, "lower": 1}
    assert "glove.6B.50d.multi30k_subset.txt.gz (word2vec, 11067×50)" in built.description


def test_existing_path_resolves_to_a_file_source(glove_path):
    source = resolve_source(str(glove_path), oov="zeros")
    assert source.name == f"file:{glove_path}" and source.is_pretrained


def test_well_known_names_take_a_local_path(glove_path):
    built = resolve_source("glove-6B-50", path=str(glove_path)).build(request_for(["the", "cat"], 50))
    assert built.coverage.found == 2


def test_well_known_names_without_network_explain_how_to_use_a_local_file(tmp_path, monkeypatch):
    monkeypatch.setenv("GENSIM_DATA_DIR", str(tmp_path / "gensim-data"))
    request = request_for(["the"], 300)
    with pytest.raises(RuntimeError, match=r"glove.840B.300d.*source='file:/path/to/glove.840B.300d.txt'.*'path'"):
        resolve_source("glove").build(request)
    for name in ("word2vec", "fasttext", "glove-wiki-gigaword-300"):
        with pytest.raises(RuntimeError, match=r"EMBINIT_OFFLINE is set.*source='file:"):
            resolve_source(name).build(request)


def test_gensim_data_local_copy_is_used_offline(glove_path, tmp_path, monkeypatch):
    folder = tmp_path / "gensim-data" / "glove-wiki-gigaword-50"
    folder.mkdir(parents=True)
    shutil.copy(glove_path, folder / "glove-wiki-gigaword-50.gz")
    monkeypatch.setenv("GENSIM_DATA_DIR", str(tmp_path / "gensim-data"))
    for name in ("glove-wiki-gigaword-50", "glove-6B-50"):
        assert resolve_source(name).build(request_for(["the", "cat"], 50)).coverage.found == 2


def test_unknown_options_and_missing_files_raise(glove_path, tmp_path):
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['colour'\].*on_bad_line"):
        resolve_source(f"file:{glove_path}", colour="red")
    with pytest.raises(ValueError, match="does not exist"):
        resolve_source(f"file:{tmp_path / 'nope.txt'}")
    with pytest.raises(ValueError, match="format="):
        resolve_source(f"file:{glove_path}", format="xml")


# -- formats ------------------------------------------------------------------------------

ROWS = {"the": [0.5, -1.0, 2.0], "cat": [1e-3, 2.5e2, -3.25], "sat": [0.0, 1.0, -1.0]}


def text_lines(rows=ROWS):
    return "".join(f"{w} {' '.join(repr(v) for v in vec)}\n" for w, vec in rows.items())


def assert_rows(path, rows=ROWS, **options):
    tokens = list(rows)
    built = resolve_source(f"file:{path}", **options).build(request_for(tokens, 3))
    assert torch.equal(built.weight, torch.tensor(list(rows.values()), dtype=torch.float32))
    return built


@pytest.mark.parametrize("compression", ["plain", "gz", "bz2", "xz", "zip"])
@pytest.mark.parametrize("header", [True, False])
def test_text_formats_and_compression(tmp_path, compression, header):
    text = (f"{len(ROWS)} 3\n" if header else "") + text_lines()
    path = tmp_path / f"vectors.txt.{compression}"
    if compression == "zip":
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("vectors.txt", text)
    else:
        opener = {"plain": open, "gz": gzip.open, "bz2": bz2.open, "xz": lzma.open}[compression]
        write(path, text, opener)
    built = assert_rows(path)
    assert ("(word2vec," if header else "(glove,") in built.description


def test_fasttext_vec_trailing_spaces_and_crlf(tmp_path):
    text = "3 3\r\n" + "".join(f"{w} {' '.join(repr(v) for v in vec)} \r\n" for w, vec in ROWS.items())
    assert_rows(write(tmp_path / "wiki.vec", text))


def test_word2vec_binary_written_by_gensim(tmp_path):
    from gensim.models import KeyedVectors

    kv = KeyedVectors(3)
    kv.add_vectors(list(ROWS), np.array(list(ROWS.values()), dtype=np.float32))
    for name in ("vectors.bin", "vectors.bin.gz", "vectors.w2v"):
        path = tmp_path / name
        kv.save_word2vec_format(str(path), binary=True)
        if name == "vectors.w2v":
            assert static.detect_format(str(path)) == "word2vec_binary"
        built = assert_rows(path)
        assert "(word2vec_binary, 3×3" in built.description
    assert_rows(tmp_path / "vectors.bin", format="word2vec_binary", cache=False)


def test_fasttext_bin_with_ngram_fallback(tmp_path):
    from gensim.models import FastText
    from gensim.models.fasttext import save_facebook_model

    sentences = [["the", "cat", "sat", "on", "the", "mat"], ["the", "dog", "sat", "on", "the", "log"]] * 20
    model = FastText(sentences=sentences, vector_size=8, min_count=1, epochs=2, seed=1, workers=1, bucket=1000)
    path = tmp_path / "model.bin"
    save_facebook_model(model, str(path))
    assert static.detect_format(str(path)) == "fasttext_bin"
    tokens = ["the", "cat", "cats", "<pad>"]
    built = resolve_source(f"file:{path}").build(request_for(tokens, 8))
    kv = static.FastTextVectorSet(str(path)).kv
    assert torch.allclose(built.weight[0], torch.from_numpy(kv["the"]))
    assert torch.allclose(built.weight[2], torch.from_numpy(kv.get_vector("cats")), atol=1e-6)
    assert built.coverage.by_rule == {"exact": 2, "ngrams": 2}
    exact_only = resolve_source(f"file:{path}", fallbacks=["lower"]).build(request_for(tokens, 8))
    assert exact_only.coverage.found == 2


def test_format_override(tmp_path):
    path = write(tmp_path / "v.txt", "3 3\n" + text_lines())
    with pytest.raises(ValueError, match=r"line 1: expected a token and 3 values"):
        resolve_source(f"file:{path}", format="glove").build(request_for(["the"], 3))
    headerless = write(tmp_path / "h.txt", text_lines())
    with pytest.raises(ValueError, match="header=True but the line is not"):
        resolve_source(f"file:{headerless}", format="word2vec").build(request_for(["the"], 3))


# -- messy files --------------------------------------------------------------------------


def test_glove_840b_style_tokens_with_spaces_and_blank_lines(tmp_path):
    text = "the 1 2 3\n\n. . . 4 5 6\nat&t corp 7 8 9\n   \ncat 1 1 1\n"
    tokens, matrix, report = parse(write(tmp_path / "g.txt", text))
    assert tokens == ["the", ". . .", "at&t corp", "cat"]
    assert matrix[1].tolist() == [4, 5, 6] and matrix[2].tolist() == [7, 8, 9]
    assert report.blank_lines == 2 and report.dim == 3
    built = resolve_source(f"file:{tmp_path / 'g.txt'}").build(request_for([". . .", "cat"], 3))
    assert built.weight[0].tolist() == [4, 5, 6]


@pytest.mark.parametrize(
    "bad_line, reason",
    [
        ("dog 1 2\n", "expected a token and 3 values, found 3 fields"),
        ("dog 1 2 3 4\n", "more than 3 values"),
        ("dog 1 nan 3\n", "non-finite value"),
        ("dog 1 inf 3\n", "non-finite value"),
        ("dog 1 1e999 3\n", "non-finite value"),
        ("dog 1 two 3\n", "a value is not a number"),
    ],
)
def test_bad_lines_raise_with_file_and_line_or_are_skipped(tmp_path, bad_line, reason):
    path = write(tmp_path / "bad.txt", "4 3\nthe 1 2 3\n" + bad_line + "cat 4 5 6\nsat 7 8 9\n")
    with pytest.raises(ValueError, match=rf"bad.txt: line 3: {reason}.*on_bad_line='skip'"):
        parse(path)
    tokens, matrix, report = parse(path, on_bad_line="skip")
    assert tokens == ["the", "cat", "sat"] and report.skipped == 1 and "line 3" in report.problems[0]
    assert matrix.tolist() == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    with pytest.warns(UserWarning, match="skipped 1 bad line"):
        parse(path, on_bad_line="warn")
    with pytest.raises(ValueError, match="line 3"):
        resolve_source(f"file:{path}").build(request_for(["the"], 3))
    built = resolve_source(f"file:{path}", on_bad_line="skip").build(
        request_for(
            ["the", "dog", "cat"],
            3,
        )
    )
    assert built.pretrained_rows.tolist() == [True, False, True]


def test_bad_line_in_a_large_block_is_located(tmp_path):
    lines = [f"w{i} {i} {i + 1} {i + 2}\n" for i in range(5000)]
    lines[3210] = "w3210 1 2\n"
    tokens, matrix, report = parse(write(tmp_path / "big.txt", "".join(lines)), on_bad_line="skip")
    assert len(tokens) == 4999 and report.skipped == 1 and "line 3211" in report.problems[0]
    assert matrix[-1].tolist() == [4999, 5000, 5001]


def test_duplicates_keep_the_first_and_are_counted(tmp_path):
    path = write(tmp_path / "dup.txt", "the 1 1 1\ncat 2 2 2\nthe 3 3 3\nthe 4 4 4\n")
    tokens, matrix, report = parse(path)
    assert tokens == ["the", "cat"] and matrix[0].tolist() == [1, 1, 1] and report.duplicates == 2
    built = resolve_source(f"file:{path}").build(request_for(["the"], 3))
    assert built.weight[0].tolist() == [1, 1, 1] and "2 duplicate tokens" in built.description


def test_invalid_utf8_policies(tmp_path):
    path = write(tmp_path / "utf.txt", b"caf\xe9 1 2 3\ncat 4 5 6\n\xff\xfe 7 8 9\n")
    with pytest.warns(UserWarning, match=r"2 token\(s\) with invalid UTF-8"):
        tokens, _, report = parse(path)
    assert tokens == ["caf\ufffd", "cat", "\ufffd\ufffd"] and report.invalid_utf8 == 2
    with pytest.raises(ValueError, match=r"utf.txt: line 1: token b'caf\\xe9' is not valid UTF-8"):
        parse(path, encoding_errors="strict")
    with pytest.warns(UserWarning):
        tokens, _, _ = parse(path, encoding_errors="backslashreplace")
    assert tokens[0] == "caf\\xe9"


def test_header_count_mismatch_warns_and_bom_is_dropped(tmp_path):
    path = write(tmp_path / "bom.txt", "\ufeff5 3\n" + text_lines())
    with pytest.warns(UserWarning, match="announces 5 vectors but the file has 3"):
        tokens, _, report = parse(path)
    assert tokens == list(ROWS) and report.header_count == 5


def test_empty_file_raises(tmp_path):
    with pytest.raises(ValueError, match="no vectors"):
        parse(write(tmp_path / "empty.txt", "\n\n"))


# -- the cache ----------------------------------------------------------------------------


def test_second_load_uses_the_cache_and_a_changed_file_is_parsed_again(tmp_path, isolated_cache, monkeypatch):
    path = write(tmp_path / "v.txt", text_lines())
    calls = []
    original = TextVectorParser.parse

    def counting(self, sink):
        calls.append(self.path)
        return original(self, sink)

    monkeypatch.setattr(TextVectorParser, "parse", counting)
    first = assert_rows(path)
    second = assert_rows(path)
    assert len(calls) == 1 and first.description == second.description
    entries = list((isolated_cache / "vectors").iterdir())
    assert len(entries) == 1 and {p.name for p in entries[0].iterdir()} == {"matrix.npy", "tokens.txt", "meta.json"}
    assert np.load(entries[0] / "matrix.npy", mmap_mode="r").shape == (3, 3)
    changed = dict(ROWS, cat=[9.0, 9.0, 9.0])
    write(path, text_lines(changed))
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    assert_rows(path, changed)
    assert len(calls) == 2
    assert_rows(path, changed, cache=False)
    assert len(calls) == 3


def test_cache_entry_is_memory_mapped_and_gathers_rows(tmp_path):
    rows = {f"w{i}": [float(i), float(-i), 0.5] for i in range(1000)}
    path = write(tmp_path / "v.txt", text_lines(rows))
    table = static.open_vector_file(str(path), static.FileVectorsOptions(progress=False))
    assert isinstance(table.matrix, np.memmap)
    assert table.gather([999, 3]).tolist() == [[999.0, -999.0, 0.5], [3.0, -3.0, 0.5]]


def test_failed_parse_leaves_no_cache_entry(tmp_path, isolated_cache):
    path = write(tmp_path / "bad.txt", "the 1 2 3\ncat 1 2\n")
    with pytest.raises(ValueError):
        resolve_source(f"file:{path}").build(request_for(["the"], 3))
    assert not any((isolated_cache / "vectors").iterdir())


def test_npy_writer_fixes_the_row_count(tmp_path):
    writer = vector_cache.NpyRowWriter(tmp_path / "m.npy", 2)
    writer(np.ones((3, 2), np.float32))
    writer(np.zeros((1, 2), np.float32))
    writer.close()
    assert np.load(tmp_path / "m.npy").tolist() == [[1, 1], [1, 1], [1, 1], [0, 0]]


def test_dimension_inference_and_explicit_dim(tmp_path):
    assert vector_file.infer_dim([b"a 1 2\n", b"b 1 2\n", b"c d 1 2\n"]) == 2
    path = write(tmp_path / "g.txt", "x y 1 2\nb 1 2\nc 3 4\n")
    tokens, _, _ = parse(path, dim=2)
    assert tokens == ["x y", "b", "c"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert parse(path)[0] == ["x y", "b", "c"]
