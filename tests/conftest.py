import pytest

from tests.shared_data import require_shared_data


@pytest.fixture
def shared_data():
    """The shared data directory (skips, or fails under CI=true, when it is missing)."""
    return require_shared_data()
