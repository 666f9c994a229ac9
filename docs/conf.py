"""Sphinx configuration of the sklaplace documentation site.

Build it with ``python -m sphinx -W --keep-going -b html docs docs/_build/html``
(after ``pip install -e ".[docs]"``). The build reads nothing from the network:
no intersphinx inventories, no remote images or fonts.
"""

import os
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's sklaplace, and benchmarks/ for the benchmarks page

import sklaplace  # noqa: E402

project = "sklaplace"
author = "sklaplace developers"
copyright = "sklaplace developers"  # noqa: A001
release = version = getattr(sklaplace, "__version__", "0.1.0")

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py",
                    "auto_examples/*.zip", "auto_examples/*.md5", "auto_examples/*.json",
                    "sg_execution_times.rst", "**/sg_execution_times.rst"]
templates_path = ["_templates"]
html_static_path = ["_static"]
suppress_warnings = ["config.cache"]  # sphinx-gallery's configuration holds functions

# --- API reference: one page per public name (docs/api.rst lists them, autosummary writes them)
autosummary_generate = True
autodoc_default_options = {}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks = set()  # tests/test_docstrings.py validates the docstrings

# --- Markdown pages (the user guide); formulas are written in Unicode, so no maths renderer
# (MathJax would load from a CDN) is needed
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# --- The gallery: examples/ executed at build time, figures kept, back-references per API page
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "ignore_pattern": r"__init__\.py",
    "plot_gallery": "True",
    "download_all_examples": False,
    "remove_config_comments": True,
    "doc_module": ("sklaplace",),
    "backreferences_dir": "generated/backreferences",
    "reference_url": {"sklaplace": None},
    "within_subsection_order": "FileNameSortKey",
    "show_memory": False,
    "capture_repr": (),
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
    "run_stale_examples": False,
    "abort_on_example_error": True,
    "write_computation_times": False,  # its page loads jQuery and DataTables from CDNs
}

# --- Theme: pydata-sphinx-theme with its bundled assets only
html_theme = "pydata_sphinx_theme"
html_title = "sklaplace"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 4,
    "icon_links": [],
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
# pages without sub-pages have no section navigation to show
html_sidebars = {page: [] for page in ("index", "benchmarks", "defaults", "architecture")}
html_css_files = ["custom.css"]
html_show_sourcelink = False
html_copy_source = False

# --- The API reference page, written from the public modules' ``__all__``: a name added to a
# module's ``__all__`` gets its page on the next build. Each name is listed once, under the first
# module below that exports it (``sklaplace.NormalPrediction`` is also
# ``sklaplace.distributions.NormalPrediction``). tests/test_public_surface.py checks that this
# list names every public module.
API_SECTIONS = [
    ("sklaplace", "Estimators, predictive distributions and the weight posterior",
     "The two estimators, what their ``predict_dist`` returns, the Gaussian over the weights "
     "(``posterior_``) and ``predict_dist`` through a Pipeline."),
    ("sklaplace.distributions", "More predictive distributions, and the links",
     "The distributions not exported at the top level, and the functions that turn a "
     "Gaussian over the logits into class probabilities."),
    ("sklaplace.metrics", "Metrics and scorers",
     "Calibration, proper scores, interval coverage, OOD scores, and scorers for "
     "``GridSearchCV``."),
    ("sklaplace.ood", "Out-of-distribution detection",
     "A detector in scikit-learn's outlier API over a fitted estimator."),
    ("sklaplace.plotting", "Displays",
     "matplotlib Displays with ``from_estimator`` and ``from_predictions``."),
    ("sklaplace.acquisition", "Acquisition functions",
     "What to label or evaluate next: active learning (entropy, BALD) and Bayesian "
     "optimisation (expected improvement, confidence bound, Thompson sampling)."),
    ("sklaplace.posterior", "Weight posterior", ""),
    ("sklaplace.nets", "Networks", "The default network of the estimators, a torch module."),
    ("sklaplace.io", "Saving and loading",
     "Files that load without running code: the way to share fitted models."),
]


def write_api_page(path):
    """Write the API reference page (an ``autosummary`` table per public module)."""
    import importlib

    seen = set()
    lines = [".. This page is written by conf.py from the public modules' __all__: do not edit.",
             "", ".. _api:", "", "API reference", "=============", "",
             "Everything importable from these modules is public; the rest of the package "
             "(modules and packages whose names start with an underscore) may change without "
             "notice.", ""]
    for module_name, title, text in API_SECTIONS:
        module = importlib.import_module(module_name)
        names = [name for name in module.__all__ if id(getattr(module, name)) not in seen]
        seen.update(id(getattr(module, name)) for name in module.__all__)
        if not names:
            continue
        heading = f"``{module_name}``: {title}"
        lines += [heading, "-" * len(heading), "", f".. module:: {module_name}", "",
                  *([text, ""] if text else []),
                  f".. currentmodule:: {module_name}", "", ".. autosummary::",
                  "   :toctree: generated/", "   :nosignatures:", "",
                  *(f"   {name}" for name in names), ""]
    text = "\n".join(lines)
    if not path.exists() or path.read_text() != text:  # unchanged: no rebuild of the page
        path.write_text(text)


write_api_page(Path(__file__).parent / "api.rst")


def _no_gallery_no_figures(app, config):
    """Without the gallery's execution (``-D sphinx_gallery_conf.plot_gallery=0``, a quick
    build) the figures that the guide takes from the gallery do not exist: say nothing."""
    if str(config.sphinx_gallery_conf.get("plot_gallery")).lower() in ("0", "false"):
        config.suppress_warnings = [*config.suppress_warnings, "image.not_readable"]


def setup(app):
    app.connect("config-inited", _no_gallery_no_figures, priority=100)
