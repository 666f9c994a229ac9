import os

import pytest
import torch

from sklaplace.benchmarks.data import default_data_dir

# Two cores on CI; one torch thread per pytest-xdist worker keeps them from fighting.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def data_dir():
    try:
        return default_data_dir()
    except FileNotFoundError as exc:
        pytest.skip(f"offline benchmark data not available: {exc}")
