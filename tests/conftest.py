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


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items):
    """Under ``--dist loadgroup`` (``make test``), a test file's tests run on one worker, so the fixtures it shares
    (trained checkpoints, tokenizers) are built once; a test that names its own ``xdist_group`` (a docs page's
    blocks, the Ray tests) keeps it."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
