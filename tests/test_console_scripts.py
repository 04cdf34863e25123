"""Every console script exits 0 on success: ``--help`` of each command, ``--version``, and a real quick start.

A console script runs ``sys.exit(main())``: a ``main`` that returned data (the quick start's rows) made a
successful run exit with status 1 and its data on stderr. The scripts are read from ``pyproject.toml``.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from lightning_embinit import __version__
from lightning_embinit.commands import main as cli
from tests.test_cli_errors import console_script

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
SCRIPTS: dict[str, str] = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["scripts"]
COMMANDS = [
    ("embinit", ["--help"]),
    *[("embinit", [sub, "--help"]) for sub in cli.COMMANDS],
    ("embinit-quickstart", ["--help"]),
]


def entry_point(name: str) -> Callable[[], object]:
    module, _, function = SCRIPTS[name].partition(":")
    return getattr(importlib.import_module(module), function)


def run_script(name: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> object:
    """What the console script ``name`` exits with for ``args`` (as its wrapper runs it: ``sys.exit(main())``)."""
    monkeypatch.setattr(sys, "argv", [name, *args])
    with pytest.raises(SystemExit) as exit:
        sys.exit(entry_point(name)())
    return exit.value.code


def test_the_package_declares_its_console_scripts():
    assert set(SCRIPTS) == {"embinit", "embinit-quickstart"}


@pytest.mark.parametrize(("name", "args"), COMMANDS, ids=[" ".join([n, *a]) for n, a in COMMANDS])
def test_help_of_every_command_exits_0(name, args, monkeypatch, capsys):
    assert run_script(name, args, monkeypatch) in (0, None)
    assert "usage:" in capsys.readouterr().out


def test_embinit_help_names_the_package_commands_too(monkeypatch, capsys):
    run_script("embinit", ["--help"], monkeypatch)
    out = capsys.readouterr().out
    assert all(f"{command} (" in out for command in ("inspect", "sweep", "report"))


def test_embinit_version(monkeypatch, capsys):
    assert run_script("embinit", ["--version"], monkeypatch) == 0
    assert capsys.readouterr().out == f"embinit (lightning_embinit) {__version__}\n"


def test_embinit_without_a_command_is_one_line_and_status_2(capsys):
    assert cli.main([]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "embinit: error: name a command: fit, validate, test, predict, inspect, sweep, report, translate, generate, "
        "classify or transplant (`embinit --help` lists them)"
    ]


def test_a_real_inspect_through_the_entry_point_exits_0(monkeypatch, capsys):
    assert (
        run_script(
            "embinit", ["inspect", "--vocab-size", "300", "--dim", "16", "--tied", "--source", "xavier"], monkeypatch
        )
        == 0
    )
    assert "verdict" in capsys.readouterr().out.lower()


def test_the_quickstart_console_script_exits_0_after_printing_its_table(tmp_path):
    """The issue's case: the table printed, then status 1 and the rows dumped to stderr."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [
            console_script("embinit-quickstart"),
            "--settings",
            "tied-normal",
            "--steps",
            "1",
            "--d-model",
            "16",
            "--layers",
            "1",
            "--seq-len",
            "16",
            "--batch-size",
            "4",
            "--max-vocab",
            "300",
            "--skip-headline",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tied-normal" in result.stdout and "init loss" in result.stdout
    assert "{'setting'" not in result.stderr and "Traceback" not in result.stderr
