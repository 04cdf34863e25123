"""``embinit --help``, an unknown command, ``--version`` and ``report --help`` answer without importing Lightning or
torch (issue 30: 6 s for the help, 5.2 s of it Lightning's import). Asserted on ``sys.modules``, not on time;
``benchmarks/bench_startup.py`` times them."""

from __future__ import annotations

import subprocess
import sys

from lightning_embinit.commands import main as cli

LIGHT_PATHS = [["--help"], ["-h"], ["translate"], ["--version"], [], ["report", "--help"], ["sweep", "--help"]]


def test_help_and_argument_errors_import_neither_lightning_nor_torch():
    code = (
        "import contextlib, io, sys\n"
        "import lightning_embinit.commands.main as cli\n"
        f"for argv in {LIGHT_PATHS!r}:\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "        with contextlib.suppress(SystemExit):\n"
        "            cli.main(argv)\n"
        "print('lightning' in sys.modules, 'torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"], result.stderr


def test_the_help_lists_every_command(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: embinit") and "{fit,validate,test,predict}" in out
    assert all(command in out for command in (*cli.LIGHTNING_COMMANDS, *cli.OTHER_COMMANDS))
    assert cli.MORE_COMMANDS in out and "`embinit fit --help`" in out


def test_an_unknown_command_is_one_line_naming_every_command(capsys):
    assert cli.main(["translat"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("embinit: error: unknown command 'translat'; name a command: ")
    assert all(command in line for command in (*cli.LIGHTNING_COMMANDS, *cli.OTHER_COMMANDS))


def test_the_package_names_are_still_there():
    import lightning_embinit

    for name in lightning_embinit.__all__:
        assert getattr(lightning_embinit, name) is not None
