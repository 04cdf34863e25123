"""Faults in the package's text and YAML files: a byte-order mark, CRLF with a trailing blank line, a key given twice,
a binary file or a directory where a file is expected; each a clear error naming the file, or the right result."""

from __future__ import annotations

import re

import pytest

from lightning_embinit.commands import main as cli
from lightning_embinit.text_files import open_text, read_text_lines
from lightning_embinit.vocabulary import read_token_file

BINARY = bytes(range(256))
DUPLICATE = "trainer:\n  max_steps: 3\n  max_epochs: 1\n  max_steps: 4\n"


def test_a_utf8_byte_order_mark_is_not_read_and_a_crlf_token_file_with_a_blank_last_line_adds_no_empty_token(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_bytes("\ufefffirst\nsecond\n".encode())
    with open_text(str(path), "test") as handle:
        assert handle.readline() == "first\n"
    assert read_text_lines(str(path), "test") == ["first", "second"]
    tokens = tmp_path / "tokens.txt"
    tokens.write_bytes("\ufeff<pad>\r\n<unk>\r\n \r\nword\r\n\r\n".encode())
    assert read_token_file(tokens) == ["<pad>", "<unk>", " ", "word"]
    (tmp_path / "latin.txt").write_bytes("café\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"test file .*latin.txt is not valid utf-8 text \(byte 3"):
        read_text_lines(str(tmp_path / "latin.txt"), "test")


def test_yaml_files_refuse_a_key_given_twice_and_name_binary_files_and_directories(tmp_path):
    from lightning_embinit.yaml_files import read_yaml  # new with this check: the test fails without it

    (tmp_path / "dup.yaml").write_text(DUPLICATE, encoding="utf-8")
    with pytest.raises(ValueError, match=r"key 'max_steps' is given a second time \(first on line 2\)") as error:
        read_yaml(tmp_path / "dup.yaml", "config")
    assert 'dup.yaml", line 4, column 3' in str(error.value)
    merged = "base: &base {a: 1, b: 2}\nother:\n  <<: *base\n  b: 3\n"  # a key after a merge overrides it
    (tmp_path / "merge.yaml").write_text(merged, encoding="utf-8")
    assert read_yaml(tmp_path / "merge.yaml", "config")["other"] == {"a": 1, "b": 3}
    (tmp_path / "bin.yaml").write_bytes(BINARY)
    with pytest.raises(ValueError, match=r"config .*bin.yaml is not a text file \(binary\?\)"):
        read_yaml(tmp_path / "bin.yaml", "config")
    with pytest.raises(ValueError, match=rf"config {tmp_path} is a directory; give the YAML file in it"):
        read_yaml(tmp_path, "config")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (BINARY, r"config file .*bin.yaml is not a text file \(binary\?\)"),
        (DUPLICATE.encode(), r"key 'max_steps' is given a second time \(first on line 2\).*bin.yaml\", line 4"),
    ],
    ids=["binary", "duplicate-key"],
)
def test_embinit_fit_names_a_binary_or_duplicate_key_config(tmp_path, capsys, content, expected):
    (tmp_path / "bin.yaml").write_bytes(content)
    try:
        status = cli.main(["fit", "--config", str(tmp_path / "bin.yaml")])
    except SystemExit as exit:  # the parser's refusals exit, the others return the status
        status = exit.code
    error = capsys.readouterr().err
    assert status == 2 and error.startswith("embinit fit: error: ") and len(error.strip().splitlines()) == 1
    assert re.search(expected, error), error
