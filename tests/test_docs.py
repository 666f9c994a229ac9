"""The documentation site: it builds without warnings, has a page for every public name, and
the user guide's Python snippets run as written (each page in one namespace, in order).

The build runs with the gallery's execution off (``plot_gallery=0``): executing the examples
takes minutes on two shared cores, and each example is a script that runs on its own
(``python examples/plot_*.py``). ``python -m sphinx -W --keep-going -b html docs <out>``
executes them.
"""

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
import sklearn
import torch
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GUIDE_PAGES = sorted((DOCS / "user_guide").glob("*.md"))
# Blocks that start a dask cluster: shown for users with one, not run here.
NEEDS_A_CLUSTER = "Client("
NEEDS_CUDA = 'device="cuda"'
# scikit-learn 1.8's temperature scaling; the page names sigmoid calibration for earlier releases
TEMPERATURE, SIGMOID = 'method="temperature"', 'method="sigmoid"'


def _api_modules():
    """The modules docs/conf.py writes the API reference from (its ``API_SECTIONS``)."""
    tree = ast.parse((DOCS / "conf.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == "API_SECTIONS":
            return [section[0] for section in ast.literal_eval(node.value)]
    raise AssertionError("docs/conf.py has no API_SECTIONS")


def test_the_api_reference_covers_every_public_module():
    from test_public_surface import PUBLIC_MODULES

    assert set(_api_modules()) == set(PUBLIC_MODULES)


def test_the_site_builds_without_warnings(tmp_path):
    out = tmp_path / "html"
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
               "-d", str(tmp_path / "doctrees"), "-D", "sphinx_gallery_conf.plot_gallery=0",
               str(DOCS), str(out)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]

    pages = {path.name for path in (out / "generated").glob("*.html")}
    for module_name in _api_modules():  # each name once, under the first module exporting it
        for name in importlib.import_module(module_name).__all__:
            assert any(page.endswith(f".{name}.html") for page in pages), (
                f"{module_name}.{name} has no API page")
    # class pages document the methods (inherited from sklaplace's mixins too)
    page = (out / "generated" / "sklaplace.LaplaceClassifier.html").read_text()
    for method in ("fit", "predict_proba", "predict_dist", "partial_fit"):
        assert f'id="sklaplace.LaplaceClassifier.{method}"' in page, method
    for page in GUIDE_PAGES:
        assert (out / "user_guide" / f"{page.stem}.html").exists(), page.name
    assert (out / "auto_examples" / "index.html").exists()
    # nothing any page loads comes from another host (the theme's assets are bundled)
    for html in out.rglob("*.html"):
        text = html.read_text()
        assert not re.search(r'<(script|link|img)[^>]+(src|href)="(https?:)?//', text), html.name


def _blocks(page):
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


@pytest.mark.parametrize("page", [p.name for p in GUIDE_PAGES if _blocks(p)])
def test_user_guide_snippets_run(page, monkeypatch, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import sklaplace._laplace.nets

    # Same code path, fewer epochs: the snippets' numbers are not what is tested.
    original = sklaplace._laplace.nets.default_net
    monkeypatch.setattr(sklaplace._laplace.nets, "default_net",
                        lambda *a, **k: original(*a[:3], min(a[3], 20), *a[4:], **k))
    monkeypatch.chdir(tmp_path)  # snippets that save files write them here
    path = DOCS / "user_guide" / page
    namespace = {}
    for block in _blocks(path):
        if NEEDS_A_CLUSTER in block:
            continue
        if NEEDS_CUDA in block and not torch.cuda.is_available():
            with pytest.raises(ValueError, match="cuda"):  # the documented error
                exec(compile(block, str(path), "exec"), namespace)  # noqa: S102
            continue
        if TEMPERATURE in block and Version(sklearn.__version__) < Version("1.8"):
            block = block.replace(TEMPERATURE, SIGMOID)
        exec(compile(block, str(path), "exec"), namespace)  # noqa: S102 - our own docs
    import matplotlib.pyplot as plt

    plt.close("all")


def test_docstring_examples_run():
    """The ``Examples`` sections of the package's docstrings, as doctests (what
    ``pytest --doctest-modules sklaplace`` runs)."""
    import doctest
    import pkgutil

    import sklaplace

    attempted = 0
    for info in pkgutil.walk_packages(sklaplace.__path__, "sklaplace."):
        module = importlib.import_module(info.name)
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0, info.name
        attempted += result.attempted
    assert attempted > 0
