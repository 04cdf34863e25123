import os

# One OpenMP thread per test process (and for the processes tests start: DDP workers, console scripts, notebook
# kernels): the models are tiny, and the suite runs one pytest-xdist worker per core (`make test`), so more threads
# would only wait on each other. Set before torch is imported; an explicit OMP_NUM_THREADS wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")

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


def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (``make test``: ``-n auto``), a test file's tests run on one worker, so the fixtures it
    shares (trained checkpoints, tokenizers, a local Ray instance) are built once; the docs tests are split by page
    instead (their ids are ``<page>:<line>``): a page's blocks share a namespace and run in order on one worker.

    A scheduler of our own rather than ``--dist loadgroup``: pytest-xdist 3.8 marks a group by rewriting
    ``item._nodeid``, which pytest 9 no longer reads, so its groups are silently ignored."""
    from xdist.scheduler import LoadScopeScheduling

    class FileOrDocsPageScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if module.endswith("tests/test_docs_blocks.py") and "[" in nodeid:
                return nodeid[nodeid.index("[") + 1 :].rsplit(":", 1)[0]
            return module

    return FileOrDocsPageScheduling(config, log)
