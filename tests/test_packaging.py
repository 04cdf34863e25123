"""The package as it is built and installed: one version, the license, the type marker and every file it needs.

The sdist and the wheel are built from a copy of the sources by setuptools' PEP 517 backend (what
``python -m build`` calls; about a second) and their contents checked. The slow test installs the wheel
(not editable) into a fresh virtualenv, its dependencies borrowed from this one, and runs the console
scripts from a directory outside the repository. ``.ci/wheel_check`` does the same from scratch.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import lightning_embinit

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "lightning_embinit"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in")
CACHES = ("__pycache__", "*.pyc", "*.pyo")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{"sdist": ..., "wheel": ...} built from a copy of the sources."""
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        if (REPO / name).exists():
            shutil.copy2(REPO / name, source / name)
    for directory in (PACKAGE, REPO / "tests"):
        shutil.copytree(directory, source / directory.name, ignore=shutil.ignore_patterns(*CACHES))
    out = tmp_path_factory.mktemp("dist")
    code = (
        "import sys, setuptools.build_meta as b; out = sys.argv[1]; sdist = b.build_sdist(out); "  # setuptools
        "wheel = b.build_wheel(out); print(sdist, wheel)"
    )  # rewrites sys.argv while it builds
    result = subprocess.run(
        [sys.executable, "-c", code, str(out)], cwd=source, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    sdist, wheel = result.stdout.split()[-2:]
    return {"sdist": out / sdist, "wheel": out / wheel}


def _metadata(text: str) -> dict[str, list[str]]:
    message = Parser().parsestr(text, headersonly=True)
    return {key: message.get_all(key) or [] for key in set(message.keys())}


def test_the_version_lives_in_one_place():
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "lightning_embinit.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?", lightning_embinit.__version__)


def test_the_license_file_is_the_declared_license():
    assert PYPROJECT["project"]["license"] == "Apache-2.0" and PYPROJECT["project"]["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text


def test_the_wheel_has_the_version_license_type_marker_and_scripts(built):
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = set(wheel.namelist())
        info = next(name.split("/")[0] for name in names if name.endswith(".dist-info/METADATA"))
        metadata = _metadata(wheel.read(f"{info}/METADATA").decode())
        license_text = wheel.read(f"{info}/licenses/LICENSE")
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    assert metadata["Version"] == [lightning_embinit.__version__]
    assert metadata["License-Expression"] == ["Apache-2.0"] and metadata["License-File"] == ["LICENSE"]
    assert license_text == (REPO / "LICENSE").read_bytes()
    assert "lightning_embinit/py.typed" in names
    assert set(metadata["Provides-Extra"]) == set(PYPROJECT["project"]["optional-dependencies"])
    for name, target in PYPROJECT["project"]["scripts"].items():
        assert f"{name} = {target}" in entry_points
    assert {name.split("/")[0] for name in names} == {"lightning_embinit", info}, "the wheel holds only the package"


def test_the_wheel_ships_every_file_of_the_package(built):
    """Data files the code reads at run time (presets, configs, corpora) must be declared, or the wheel lacks them."""
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = set(wheel.namelist())
    files = {
        path.relative_to(REPO).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".pyo")
    }
    assert sorted(files - names) == []
    with zipfile.ZipFile(built["wheel"]) as wheel:  # the quick start's study and its base, as examples/ has them
        for shipped in ("studies/headline.yaml", "configs/tied_lm.yaml"):
            packaged = wheel.read(f"lightning_embinit/studies/shipped/{shipped}")
            assert packaged == (REPO / "examples" / shipped).read_bytes(), shipped


def test_the_sdist_carries_the_license_and_builds_the_same_package(built):
    with tarfile.open(built["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
        base = sdist.getnames()[0].split("/")[0]
        metadata = _metadata(io.TextIOWrapper(sdist.extractfile(f"{base}/PKG-INFO")).read())
    assert {
        "LICENSE",
        "README.md",
        "pyproject.toml",
        "lightning_embinit/py.typed",
        "lightning_embinit/commands/main.py",
    } <= names
    assert not [name for name in names if name.startswith("tests/")], "a partial copy of the test suite"
    assert metadata["License-Expression"] == ["Apache-2.0"] and metadata["Version"] == [lightning_embinit.__version__]


@pytest.mark.slow
def test_the_installed_wheel_runs_outside_the_repository(built, tmp_path):
    """The wheel, not editable, in a fresh virtualenv (its dependencies from this one), run from elsewhere."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(built["wheel"]),
        ],
        check=True,
        timeout=300,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "EMBINIT_DEBUG")}
    env["OMP_NUM_THREADS"] = "1"

    def run(*command: str) -> subprocess.CompletedProcess:
        result = subprocess.run(command, capture_output=True, text=True, cwd=work, env=env, timeout=300)
        assert result.returncode == 0, f"{command}: {result.stderr[-3000:]}"
        return result

    probe = (
        "import importlib.metadata as m, importlib.resources as r, lightning_embinit as p; "
        "print(p.__file__); print(p.__version__ == m.version('lightning_embinit')); "
        "print(r.files('lightning_embinit').joinpath('py.typed').is_file())"
    )
    location, same_version, typed = run(str(python), "-c", probe).stdout.split()
    assert Path(location).is_relative_to(venv) and same_version == "True" and typed == "True"
    bin_dir = venv / "bin"
    assert run(str(bin_dir / "embinit"), "--version").stdout.strip().endswith(lightning_embinit.__version__)
    run(str(bin_dir / "embinit-quickstart"), "--help")
    inspected = run(
        str(bin_dir / "embinit"), "inspect", "--vocab-size", "300", "--dim", "16", "--tied", "--source", "xavier"
    )
    assert "verdict" in inspected.stdout.lower()
