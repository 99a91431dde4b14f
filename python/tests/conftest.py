import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dist_util  # noqa: E402


@pytest.fixture(scope="session")
def ranks4():
    """Four Gloo processes, shared by the session's distributed tests."""
    pool = dist_util.RankPool(4)
    yield pool
    pool.close()
