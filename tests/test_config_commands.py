"""The runs that the example configs' comments and the docs suggest do what they promise.

Each quick run (an ``embinit fit`` line that sets ``--trainer.max_steps``, ``--trainer.max_epochs`` or
``--data.init_args.max_examples``) validates and writes its checkpoint where the text says, and a suggested
``embinit validate|test`` of that checkpoint reads it back. The texts: the example configs' comments, README.md
and docs/*.md. The commands are read from the text (continuation
lines joined) and run as written from a scratch directory, with a tiny model (the ``architecture`` sizes
shrunk) and the shared data directory; the schedule, the data and the callbacks stay the text's, so a
suggested run that never validates (``max_steps`` shorter than an epoch without ``val_check_interval``) fails.
"""

from __future__ import annotations

import math
import re
import shlex
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from lightning_embinit.commands.lightning_cli import embinit_cli
from tests.shared_data import require_shared_data

REPO = Path(__file__).resolve().parent.parent
CONFIGS = sorted((REPO / "examples" / "configs").glob("*.yaml"))
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
QUICK = ("--trainer.max_steps", "--trainer.max_epochs", "--data.init_args.max_examples")
TINY = {
    "d_model": 16,
    "num_heads": 2,
    "ffn_dim": 32,
    "num_layers": 1,
    "num_encoder_layers": 1,
    "num_decoder_layers": 1,
    "qk_head_dim": 8,
    "v_head_dim": 8,
}
"""Architecture sizes of the runs here (only the keys a config sets are overridden)."""
SHARED = "${EMBINIT_SHARED_DATA:-../shared/data}/"
_COMMAND = re.compile(r"^(?:\S*/)?(embinit (?:fit|validate|test|predict)\b.*)$")


def suggested_commands(text: str, *, comments: bool) -> list[list[str]]:
    """The ``embinit fit|validate|test|predict`` commands in ``text`` (a config's comment lines, or the lines of a
    Markdown file), as argument lists without ``embinit``; a line ending in a backslash continues on the next."""
    lines = text.splitlines()
    lines = (
        [line.lstrip("#").strip() for line in lines if line.startswith("#")]
        if comments
        else [line.strip() for line in lines]
    )
    commands, current = [], None
    for line in lines:
        if current is None:
            found = _COMMAND.match(line)
            if found is None:
                continue
            current, line = "", found.group(1)
        current += " " + line.rstrip("\\")
        if not line.endswith("\\"):
            try:
                commands.append(shlex.split(current, comments=True)[1:])
            except ValueError:  # prose that shlex cannot split (an unclosed quote) is not a command to run
                pass
            current = None
    return commands


def option(args: list[str], name: str) -> str | None:
    """The value of ``name`` in ``args`` (``--name value`` or ``--name=value``; the last one wins), else None."""
    value = None
    for index, arg in enumerate(args):
        if arg == name and index + 1 < len(args):
            value = args[index + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def _all_commands() -> dict[tuple[str, ...], str]:
    """Every suggested command → where it is suggested (the first place)."""
    found: dict[tuple[str, ...], str] = {}
    for path in CONFIGS:
        for command in suggested_commands(path.read_text(encoding="utf-8"), comments=True):
            found.setdefault(tuple(command), f"examples/configs/{path.name}")
    for path in DOCS:
        for command in suggested_commands(path.read_text(encoding="utf-8"), comments=False):
            found.setdefault(tuple(command), str(path.relative_to(REPO)))
    return found


def _is_quick(command: tuple[str, ...]) -> bool:
    """A fit of an example config that the text shortens (a full run is the config's own schedule)."""
    config = REPO / (option(list(command), "--config") or "-")
    return (
        command[:1] == ("fit",)
        and "--print_config" not in command
        and config.is_file()
        and any(option(list(command), name) for name in QUICK)
    )


COMMANDS = _all_commands()
QUICK_FITS = {command: where for command, where in COMMANDS.items() if _is_quick(command)}


def _follow_ups(fit: tuple[str, ...]) -> list[list[str]]:
    """Suggested ``validate``/``test`` commands of the same config on a checkpoint the fit writes: one named under
    its ``lightning_logs/version_N/checkpoints/`` (not a ``<placeholder>`` or ``path/to.ckpt``)."""
    return [
        list(command)
        for command in COMMANDS
        if command[0] in ("validate", "test")
        and option(list(command), "--config") == option(list(fit), "--config")
        and re.search(
            r"lightning_logs/version_\d+/checkpoints/[^<>]+\.ckpt$", option(list(command), "--ckpt_path") or ""
        )
    ]


def _run(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[str]]:
    """``embinit`` on ``args`` from ``tmp_path`` with a tiny model (and batches of 4 for a run of a fixed number of
    steps that validates every N steps, not epochs) and the shared data: (the CLI, its warnings)."""
    config = REPO / option(args, "--config")
    loaded = yaml.safe_load(config.read_text(encoding="utf-8"))
    architecture = (loaded["model"].get("init_args") or {}).get("architecture") or {}
    extra = [f"--model.init_args.architecture.{key}={value}" for key, value in TINY.items() if key in architecture]
    steps_only = (loaded.get("trainer") or {}).get("check_val_every_n_epoch", 1) is None  # validates every N steps
    if steps_only and option(args, "--trainer.max_steps") and "batch_size" in (loaded["data"].get("init_args") or {}):
        extra.append("--data.init_args.batch_size=4")  # the same steps and validations, on smaller batches
    data_dir = (loaded["data"].get("init_args") or {}).get("data_dir")
    if isinstance(data_dir, str) and data_dir.startswith(SHARED):  # the configs read the variable, as users set it
        monkeypatch.setenv("EMBINIT_SHARED_DATA", str(require_shared_data(data_dir[len(SHARED) :]).parent))
    args = [str(config) if arg == option(args, "--config") else arg for arg in args]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["embinit"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli = embinit_cli(
            [*args, *extra, "--trainer.enable_progress_bar=false"], save_config_kwargs={"overwrite": True}
        )
    return cli, [str(warning.message) for warning in caught]


def test_the_texts_suggest_quick_runs_of_the_example_configs():
    """The reader finds them (a reader that found none would pass every test below)."""
    configs = {Path(option(list(command), "--config")).name for command in QUICK_FITS}
    assert {"kim_sst2.yaml", "kim_multi30k.yaml", "reinforced_baseline.yaml"} <= configs
    sst2 = [command for command, where in QUICK_FITS.items() if "kim_sst2" in option(list(command), "--config")]
    assert len(sst2) == 1, f"the config's comment and docs/classification.md suggest different quick SST-2 runs: {sst2}"
    assert _follow_ups(sst2[0]), "docs/classification.md validates the quick run's checkpoint"


@pytest.mark.parametrize("command", sorted(QUICK_FITS), ids=lambda c: Path(option(list(c), "--config")).stem)
def test_a_suggested_quick_run_validates_and_writes_its_checkpoint(command, tmp_path, monkeypatch):
    where = QUICK_FITS[command]
    cli, caught = _run(list(command), tmp_path, monkeypatch)
    trainer = cli.trainer
    assert not [message for message in caught if "could not find the monitored key" in message], where
    assert not [message for message in caught if "smaller than the logging interval" in message], where
    validated = {key: float(value) for key, value in trainer.callback_metrics.items() if key.startswith("val_")}
    assert validated and all(math.isfinite(value) for value in validated.values()), f"{where}: the run never validated"
    root = Path(option(list(command), "--trainer.default_root_dir") or ".")
    directory = tmp_path / root / "lightning_logs" / "version_0" / "checkpoints"
    written = sorted(directory.glob("*.ckpt"))
    assert written, f"{where}: no checkpoint under {root / 'lightning_logs/version_0/checkpoints'}"
    checkpoint = trainer.checkpoint_callback
    if checkpoint.monitor is not None:
        assert checkpoint.best_model_score is not None and math.isfinite(float(checkpoint.best_model_score))
        assert Path(checkpoint.best_model_path).resolve() in [path.resolve() for path in written]
    for follow_up in _follow_ups(command):
        named = Path(option(follow_up, "--ckpt_path"))
        assert named.parent == root / "lightning_logs" / "version_0" / "checkpoints", f"{where}: {named}"
        assert re.fullmatch(r"epoch=\d+-step=\d+\.ckpt", named.name), f"{where}: {named.name}"
        best = checkpoint.best_model_path
        again, _ = _run([best if arg == str(named) else arg for arg in follow_up], tmp_path, monkeypatch)
        if checkpoint.monitor is not None:
            score = float(again.trainer.callback_metrics[checkpoint.monitor])
            assert score == pytest.approx(float(checkpoint.best_model_score), rel=1e-4)
