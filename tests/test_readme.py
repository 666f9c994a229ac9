"""The README's Python snippets run as written (in order, sharing one namespace)."""

import re
from pathlib import Path


README = Path(__file__).resolve().parents[1] / "README.md"
# Blocks that start a dask cluster: shown for users with one, not run on CI.
NEEDS_A_CLUSTER = "Client("


def _blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_python_snippets():
    assert len(_blocks()) >= 3


def test_readme_snippets_run(monkeypatch):
    import sklaplace.nets

    # Same code path, fewer epochs: the snippets' numbers are not what is tested.
    original = sklaplace.nets.default_net
    monkeypatch.setattr(sklaplace.nets, "default_net",
                        lambda *a, **k: original(*a[:3], min(a[3], 20), *a[4:], **k))
    namespace = {}
    ran = 0
    for block in _blocks():
        if NEEDS_A_CLUSTER in block:
            continue
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102 - our own README
        ran += 1
    assert ran >= 3
