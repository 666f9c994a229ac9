import os

import pytest
import torch

from benchmarks.data import default_data_dir

# Two cores on CI; one torch thread per pytest-xdist worker keeps them from fighting.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="module")
def data_dir():
    try:
        return default_data_dir()
    except FileNotFoundError as exc:
        pytest.skip(f"offline benchmark data not available: {exc}")


# SKLAPLACE_TEST_DEVICE=cuda runs the suite with the default MLP (net=None) on that
# device, so the whole LA (curvature, tuning, predictive) runs there and the tests'
# exact references check it. Unset (CI, CPU machines): nothing changes.
TEST_DEVICE = os.environ.get("SKLAPLACE_TEST_DEVICE")


@pytest.fixture(autouse=True)
def _default_mlp_on_test_device(monkeypatch):
    if TEST_DEVICE:
        from sklaplace._laplace import nets

        default_net = nets.default_net

        def on_device(*args, **kwargs):
            kwargs["device"] = TEST_DEVICE
            return default_net(*args, **kwargs)

        monkeypatch.setattr(nets, "default_net", on_device)
    yield
