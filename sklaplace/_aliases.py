"""Earlier module paths of moved modules, for pickles written before the move.

A pickle names each object's class by its module path. Modules that moved into the
``metrics``, ``plotting`` and ``distributions`` packages keep their earlier paths as
aliases: importing ``sklaplace._dirichlet`` gives ``sklaplace.distributions._dirichlet``,
so a ``DirichletPrediction`` pickled from the flat layout loads as the same class. The
aliases are resolved on first import, by a finder on ``sys.meta_path``; nothing is
imported until a pickle (or code) asks for an old path.
"""

import importlib
import importlib.abc
import importlib.util
import sys

#: earlier module path → where the module lives now
MOVED = {
    "sklaplace._classification_metrics": "sklaplace.metrics._classification",
    "sklaplace._regression_metrics": "sklaplace.metrics._regression",
    "sklaplace._scoring": "sklaplace.metrics._scoring",
    "sklaplace._display": "sklaplace.plotting._display",
    "sklaplace._evidence_curve": "sklaplace.plotting._evidence_curve",
    "sklaplace._ood_histogram": "sklaplace.plotting._ood_histogram",
    "sklaplace._dirichlet": "sklaplace.distributions._dirichlet",
    "sklaplace._links": "sklaplace.distributions._links",
    "sklaplace._scipy_like": "sklaplace.distributions._scipy_like",
    "sklaplace._joint": "sklaplace.distributions._joint",
    "sklaplace.classifier": "sklaplace.estimators.classifier",
    "sklaplace.regressor": "sklaplace.estimators.regressor",
    "sklaplace._base": "sklaplace.estimators._base",
    "sklaplace._fitting": "sklaplace.estimators._fitting",
    "sklaplace._training": "sklaplace.estimators._training",
    "sklaplace._validation": "sklaplace.estimators._validation",
    "sklaplace._selection": "sklaplace.estimators._selection",
    "sklaplace._averaging": "sklaplace.estimators._averaging",
    "sklaplace._warmup": "sklaplace.estimators._warmup",
    "sklaplace._crossfit": "sklaplace.estimators._crossfit",
    "sklaplace._continual": "sklaplace.estimators._continual",
    "sklaplace._dask": "sklaplace.estimators._dask",
    "sklaplace._dask_fit": "sklaplace.estimators._dask_fit",
    "sklaplace._dask_train": "sklaplace.estimators._dask_train",
    "sklaplace._regressor_noise": "sklaplace.estimators._regressor_noise",
    "sklaplace._classifier_predictive": "sklaplace.estimators._classifier_predictive",
    "sklaplace._regressor_predictive": "sklaplace.estimators._regressor_predictive",
    "sklaplace._labels": "sklaplace.estimators._labels",
    "sklaplace._threads": "sklaplace.estimators._threads",
    "sklaplace._policy": "sklaplace._laplace.policy",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolve an earlier module path to the module at its current path."""

    def __init__(self):
        self._specs = {}

    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        module = importlib.import_module(MOVED[spec.name])
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module):
        """Nothing to run: the module is the one at its current path, already imported;
        the import system gave it the alias's spec, and it gets its own back."""
        module.__spec__ = self._specs.pop(module.__name__)


def install():
    """Put the finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedModules())  # before any finder that could see a stale file
