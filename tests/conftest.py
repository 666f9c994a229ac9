import os

import torch

# Two cores on CI; one torch thread per pytest-xdist worker keeps them from fighting.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")
