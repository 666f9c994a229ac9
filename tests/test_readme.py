"""The README's Python snippets run as written (in order, sharing one namespace)."""

import re
from pathlib import Path

import pytest
import torch


README = Path(__file__).resolve().parents[1] / "README.md"
# Blocks that start a dask cluster: shown for users with one, not run on CI.
NEEDS_A_CLUSTER = "Client("
NEEDS_CUDA = 'device="cuda"'


def _blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_python_snippets():
    assert len(_blocks()) >= 3


def test_readme_snippets_run(monkeypatch):
    import sklaplace._laplace.nets

    # Same code path, fewer epochs: the snippets' numbers are not what is tested.
    original = sklaplace._laplace.nets.default_net
    monkeypatch.setattr(sklaplace._laplace.nets, "default_net",
                        lambda *a, **k: original(*a[:3], min(a[3], 20), *a[4:], **k))
    namespace = {}
    ran = 0
    for block in _blocks():
        if NEEDS_A_CLUSTER in block:
            continue
        if NEEDS_CUDA in block and not torch.cuda.is_available():
            with pytest.raises(ValueError, match="cuda"):  # the documented error
                exec(compile(block, str(README), "exec"), namespace)  # noqa: S102
            continue
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - our own README
        ran += 1
    assert ran >= 3
