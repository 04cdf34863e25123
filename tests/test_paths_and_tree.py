"""Paths that do not depend on the working directory (``${EMBINIT_SHARED_DATA:-…}`` in configs and data paths), and
a repository tree without binaries."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from lightning_embinit.data.parallel_text import existing_file, find_file
from lightning_embinit.text_files import substitute_variables

REPO = Path(__file__).resolve().parent.parent
BINARY_SUFFIXES = (".whl", ".ckpt", ".pt", ".pth", ".bin", ".safetensors", ".so", ".zip", ".tar.gz", ".npy", ".pkl")


def test_a_data_dir_reads_the_variable_wherever_the_command_starts(tmp_path, monkeypatch):
    data = tmp_path / "data" / "sst2"
    data.mkdir(parents=True)
    (data / "train.tsv").write_text("sentence\tlabel\na b\t1\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path / "data")  # not where ../shared/data is
    monkeypatch.setenv("EMBINIT_SHARED_DATA", str(tmp_path / "data"))
    assert find_file("${EMBINIT_SHARED_DATA:-../shared/data}/sst2", "train.tsv", "sst2 train") == str(
        data / "train.tsv"
    )
    assert existing_file("${EMBINIT_SHARED_DATA:-../shared/data}/sst2/train.tsv", "train") == str(data / "train.tsv")


def test_a_missing_relative_data_dir_names_the_working_directory_and_the_variable(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EMBINIT_SHARED_DATA", raising=False)
    with pytest.raises(ValueError) as refused:
        find_file("${EMBINIT_SHARED_DATA:-../shared/data}/sst2", "train.tsv", "sst2 train")
    message = str(refused.value)
    assert "../shared/data/sst2/train.tsv" in message and str(tmp_path) in message
    assert "EMBINIT_SHARED_DATA" in message and "working directory" in message
    with pytest.raises(ValueError, match="no/such/file.txt") as absolute:
        existing_file(tmp_path / "no" / "such" / "file.txt", "training")
    assert "working directory" not in str(absolute.value)  # an absolute path needs no hint


def test_variables_follow_the_shell_rules(monkeypatch):
    monkeypatch.setenv("SET_ONE", "/a")
    monkeypatch.setenv("EMPTY_ONE", "")
    monkeypatch.delenv("UNSET_ONE", raising=False)
    assert substitute_variables("${SET_ONE:-/b}/x ${EMPTY_ONE:-/c} ${UNSET_ONE:-}") == "/a/x /c "
    with pytest.raises(ValueError, match=r"UNSET_ONE .*is not set \(write \$\{UNSET_ONE:-<default>\}"):
        substitute_variables("${UNSET_ONE}/x", where="data_dir")


def _shared_data_paths(value, found):
    if isinstance(value, dict):
        for item in value.values():
            _shared_data_paths(item, found)
    elif isinstance(value, list):
        for item in value:
            _shared_data_paths(item, found)
    elif isinstance(value, str) and "shared/data" in value:
        found.append(value)
    return found


@pytest.mark.parametrize("config", sorted((REPO / "examples" / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_example_configs_find_the_shared_data_through_the_variable(config):
    paths = _shared_data_paths(yaml.safe_load(config.read_text(encoding="utf-8")), [])
    assert all(path.startswith("${EMBINIT_SHARED_DATA:-../shared/data}/") for path in paths), paths


def test_the_repository_tracks_no_binaries():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    binaries = [name for name in tracked.splitlines() if name.endswith(BINARY_SUFFIXES)]
    assert not binaries, f"binary files are tracked (keep wheels, checkpoints and weights out of git): {binaries}"
    root_files = [name for name in tracked.splitlines() if "/" not in name]
    assert not [name for name in root_files if (REPO / name).stat().st_size > 200_000], root_files


def test_prompts_for_predict_are_the_lines_generate_reads(tmp_path):
    """``LanguageModelDataModule(predict_files=…)`` and ``embinit generate --input`` split a file alike: at ``\\n``
    only (a form feed, NEL, U+2028 or a lone ``\\r`` stays inside its line), nothing stripped, blank lines kept."""
    from lightning_embinit.commands.arguments import read_input_lines
    from lightning_embinit.data import LanguageModelDataModule
    from lightning_embinit.text_files import read_exact_lines

    text = "the cat\fsat\n  padded  \n\nU+2028\u2028inside\nNEL\x85kept\r\nlone\rcr\nlast"
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes(text.encode("utf-8"))
    expected = ["the cat\fsat", "  padded  ", "", "U+2028\u2028inside", "NEL\x85kept", "lone\rcr", "last"]
    assert read_exact_lines(prompts, "predict") == read_input_lines(str(prompts)) == expected
    data = LanguageModelDataModule(seq_len=8, batch_size=4, max_size=50, predict_files=str(prompts))
    assert data.predict_dataloader().dataset.prompts == expected
    (tmp_path / "bad.txt").write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(ValueError, match=r"predict file .*bad.txt is not utf-8 text: line 2, byte 3 .*encoding="):
        read_exact_lines(tmp_path / "bad.txt", "predict")
