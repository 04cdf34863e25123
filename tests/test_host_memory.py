"""lightning_embinit.host_memory: freed blocks kept in glibc's heap, counted by the kernel's own page-fault counter in
a fresh process; the variable that turns it off; a C library that is not glibc; the commands that call it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from lightning_embinit import host_memory
from lightning_embinit.checks import environment_flag
from lightning_embinit.commands import main as commands_main
from lightning_embinit.commands import quickstart

GLIBC = host_memory._glibc_mallopt() is not None

REPEATED_ALLOCATION = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    from lightning_embinit.host_memory import keep_freed_memory, freed_memory_kept
    if sys.argv[1] == "keep":
        assert keep_freed_memory() and freed_memory_kept()
    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(2):
        np.ones(6 * 2**20)  # 48 MiB: above the 32 MiB up to which glibc's own threshold adapts
    before = faults()
    for _ in range(5):
        np.ones(6 * 2**20)
    print((faults() - before) / 5)
    """
)


def _faults_per_allocation(setting: str) -> float:
    result = subprocess.run(
        [sys.executable, "-c", REPEATED_ALLOCATION, setting], capture_output=True, text=True, check=True
    )
    return float(result.stdout.strip())


@pytest.mark.skipif(not GLIBC, reason="keep_freed_memory changes glibc's malloc only (this C library is not glibc)")
def test_kept_memory_is_reused_without_page_faults():
    returned = _faults_per_allocation("return")
    kept = _faults_per_allocation("keep")
    assert returned >= 20  # 48 MiB mapped afresh each time: at least 24 huge pages, else 12,288 small ones
    assert kept <= 2


class _FakeMallopt:
    def __init__(self, answer: int = 1, largest_threshold: int = 2**31 - 1) -> None:
        self.calls: list[tuple[int, int]] = []
        self.answer = answer
        self.largest_threshold = largest_threshold

    def __call__(self, parameter: int, value: int) -> int:
        self.calls.append((parameter, value))
        return self.answer if parameter != -3 or value <= self.largest_threshold else 0


@pytest.fixture
def fake_mallopt(monkeypatch):
    fake = _FakeMallopt()
    monkeypatch.setattr(host_memory, "_glibc_mallopt", lambda: fake)
    monkeypatch.setitem(host_memory._state, "kept", False)
    return fake


def test_the_settings_are_mallopts_thresholds(fake_mallopt):
    assert host_memory.keep_freed_memory() and host_memory.freed_memory_kept()
    # <malloc.h>: M_TRIM_THRESHOLD -1, M_MMAP_THRESHOLD -3; mallopt takes an int
    assert fake_mallopt.calls == [(-3, 1 << 30), (-1, 2**31 - 1)]
    assert host_memory.keep_freed_memory()
    assert len(fake_mallopt.calls) == 2  # once per process


def test_a_glibc_that_refuses_a_gib_keeps_its_documented_largest(fake_mallopt):
    fake_mallopt.largest_threshold = 32 << 20  # glibc's manual: at most 4 MiB · sizeof(long)
    assert host_memory.keep_freed_memory()
    assert fake_mallopt.calls == [(-3, 1 << 30), (-3, 32 << 20), (-1, 2**31 - 1)]


def test_a_refused_setting_is_reported(fake_mallopt):
    fake_mallopt.answer = 0
    assert not host_memory.keep_freed_memory() and not host_memory.freed_memory_kept()


def test_another_c_library_is_left_alone(monkeypatch):
    monkeypatch.setattr(host_memory, "_glibc_mallopt", lambda: None)
    monkeypatch.setitem(host_memory._state, "kept", False)
    assert not host_memory.keep_freed_memory() and not host_memory.freed_memory_kept()


def test_the_platform_decides_whether_there_is_a_glibc(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert host_memory._glibc_mallopt() is None


@pytest.mark.parametrize(("value", "kept"), [(None, True), ("1", True), ("0", False), ("off", False), ("False", False)])
def test_the_variable_turns_it_off_for_training(fake_mallopt, monkeypatch, value, kept):
    if value is None:
        monkeypatch.delenv(host_memory.VARIABLE, raising=False)
    else:
        monkeypatch.setenv(host_memory.VARIABLE, value)
    assert host_memory.keep_freed_memory_for_training() is kept
    assert bool(fake_mallopt.calls) is kept


def _recorder(monkeypatch, module) -> list[bool]:
    calls: list[bool] = []
    monkeypatch.setattr(module, "keep_freed_memory_for_training", lambda: calls.append(True) or True)
    return calls


def test_lightning_commands_keep_freed_memory(monkeypatch, tmp_path, capsys):
    calls = _recorder(monkeypatch, commands_main)
    with pytest.raises(SystemExit) as refused:
        commands_main.lightning_main(["fit", "--config", str(tmp_path / "missing.yaml")])
    assert refused.value.code == 2 and "missing.yaml" in capsys.readouterr().err
    assert calls == [True]


def test_the_quick_start_keeps_freed_memory(monkeypatch, capsys):
    calls = _recorder(monkeypatch, quickstart)
    monkeypatch.setattr(quickstart, "run", lambda *args, **kwargs: calls.append(False) or [])
    monkeypatch.setattr(quickstart, "format_table", lambda rows: "")
    quickstart.main(["--skip-headline", "--settings", "untied"])
    assert calls == [True, False]  # before the first fit


def test_a_sweep_trial_keeps_freed_memory(monkeypatch, tmp_path):
    from lightning_embinit.studies import worker

    calls = _recorder(monkeypatch, worker)
    monkeypatch.setattr(worker.os, "dup2", lambda *args: None)
    monkeypatch.setattr(worker.torch, "set_num_threads", lambda threads: None)
    monkeypatch.setattr(worker.torch, "set_num_interop_threads", lambda threads: None)
    monkeypatch.setattr(worker.os, "environ", dict(worker.os.environ))
    worker.enter_job({"log_file": str(tmp_path / "trial.log"), "threads": 1})
    assert calls == [True]


@pytest.mark.parametrize(
    ("value", "default", "on"),
    [
        (None, False, False),
        (None, True, True),
        ("", True, True),
        ("  ", False, False),
        ("1", False, True),
        ("yes", False, True),
        ("anything", False, True),
        ("0", True, False),
        ("FALSE", True, False),
        (" No ", True, False),
        ("off", True, False),
    ],
)
def test_an_environment_flag_reads_as_every_on_off_variable_of_the_package(monkeypatch, value, default, on):
    if value is None:
        monkeypatch.delenv("EMBINIT_TEST_FLAG", raising=False)
    else:
        monkeypatch.setenv("EMBINIT_TEST_FLAG", value)
    assert environment_flag("EMBINIT_TEST_FLAG", default=default) is on
