import os
import sys

# One OpenMP thread per test process (and for the processes tests start: DDP workers, console scripts, notebook
# kernels): the models are tiny, and the suite runs one pytest-xdist worker per core (`make test`), so more threads
# would only wait on each other. Set before torch is imported; an explicit OMP_NUM_THREADS wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")
if "torch" in sys.modules:  # imported before this file (a plugin, or pytest -p): its pool is already sized
    sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

import pytest  # noqa: E402

from tests.shared_data import require_shared_data


@pytest.fixture(scope="session", autouse=True)
def isolated_vector_cache(tmp_path_factory):
    """Keep the vector cache of every test (and of the DDP workers they spawn) out of ~/.cache."""
    previous = os.environ.get("EMBINIT_CACHE_DIR")
    os.environ["EMBINIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("embinit-cache"))
    yield
    if previous is None:
        os.environ.pop("EMBINIT_CACHE_DIR", None)
    else:
        os.environ["EMBINIT_CACHE_DIR"] = previous


@pytest.fixture
def shared_data():
    """The shared data directory (skips, or fails under CI=true, when it is missing)."""
    return require_shared_data()


LONGEST_FIRST = (
    "tests/test_studies_ray.py",
    "tests/test_studies_examples.py",
    "tests/test_notebooks.py",
    "tests/test_studies_sweep.py",
    "tests/test_quickstart.py",
    "tests/test_hf_lm.py",
    "tests/test_quiet_cli.py",
    "docs/tied_lm.md",
    "docs/translation.md",
    "tests/test_config_commands.py",
    "tests/test_sharded_tables.py",
    "tests/test_ddp.py",
)
"""The longest scopes (a test file, or a docs page) of a run on 2 cores, longest first: a worker starts them first,
so that the run does not end with one worker alone on a long file while the other is idle."""


def _scope(nodeid: str) -> str:
    """A test's file, or for a docs test its page (the id is ``<page>:<line>``)."""
    module = nodeid.split("::", 1)[0]
    if module.endswith("tests/test_docs_blocks.py") and "[" in nodeid:
        return nodeid[nodeid.index("[") + 1 :].rsplit(":", 1)[0]
    return module


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, :data:`LONGEST_FIRST`'s scopes go first (the order within a scope is kept)."""
    if getattr(config.option, "numprocesses", None) or os.environ.get("PYTEST_XDIST_WORKER"):
        rank = {scope: index for index, scope in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(_scope(item.nodeid), len(rank)))


def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (``make test``: ``-n auto``), a test file's tests run on one worker, so the fixtures it
    shares (trained checkpoints, tokenizers, a local Ray instance) are built once; the docs tests are split by page
    instead (their ids are ``<page>:<line>``): a page's blocks share a namespace and run in order on one worker.

    A scheduler of our own rather than ``--dist loadgroup``: pytest-xdist 3.8 marks a group by rewriting
    ``item._nodeid``, which pytest 9 no longer reads, so its groups are silently ignored."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # keep the collection's order (LONGEST_FIRST), not the most tests first

    class FileOrDocsPageScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return FileOrDocsPageScheduling(config, log)


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    """pytest-xdist 3.8, out of a terminal and with ``-q``, prints its placeholder status "bringing up nodes..."
    twice (when the workers start and when they have collected); ``make test`` keeps the first only. The reporter is
    xdist's plugin ``terminaldistreporter``; if a release renames it, the line is printed twice again, nothing more."""
    reporter = config.pluginmanager.get_plugin("terminaldistreporter")
    if reporter is None or config.option.verbose >= 0:
        return
    show_status = reporter.ensure_show_status
    shown = []

    def show_once() -> None:
        if not shown:
            shown.append(True)
            show_status()

    reporter.ensure_show_status = show_once
