"""The names of a model file (:mod:`sklaplace.io`): the schema of the fitted state.

A file names each stored type and each of its fields for what it is
(``posterior/eigen`` with ``eigenvectors``, ``prior_std``…), never by a class or an
attribute of the code. :data:`TYPES` is the one table that maps them to the code: each
type's class, and each field to the attribute that holds it in memory. Renaming a class,
an attribute, a function or a module of sklaplace changes this table's code side only;
the files stay the same. The classes of sklaplace that a file names as a parameter (the
default MLP, its losses and optimizers…) have names of their own in :func:`classes`,
the one function a file may call in :data:`FUNCTIONS`, and what a trained skorch net
holds besides its parameters in :data:`NET_FIELDS`.

Format version 1 named types, fields, classes and the function by the code's names of
the time: :func:`from_version_1` translates such a document into version 2 by the frozen
tables ``_V1_*`` (they never change with the code), before anything in it is checked or
built, so that version-1 files get every check that version-2 files get.
"""

import dataclasses
import functools

from .estimators._fitting import _build_posterior
from ._laplace import likelihoods
from ._laplace.continual import TaskEvidence
from ._laplace.evidence import Evidence
from ._laplace.fitted import FittedLaplace
from ._laplace.hyperparameters import TARGET_SCALING, Hyperparameters, TargetScale
from ._laplace.outside import RangeKernel
from ._laplace.posterior import DiagPosterior, EigenPosterior, KronPosterior
from ._laplace.refine import RefinedSubset
from ._laplace.subsets import AllWeights, LastLayer, Subnetwork, feature_body


class Refused(ValueError, TypeError):
    """A model file's content that :mod:`sklaplace.io` does not load.

    A ``ValueError`` (the file is wrong, not the call); also a ``TypeError``, which
    unknown types in a file raised before.
    """


class Spec:
    """How one type is written: ``fields``, {field name in the file: attribute};
    ``caches``: the attributes the class computes when needed, not written (attribute →
    the value it has before, or absent when not listed in ``reset``); ``derived``:
    attributes recomputed on reading from the others (``finish``)."""

    def __init__(self, cls, fields, caches=(), reset=None, derived=(), finish=None):
        self.cls, self.fields, self.caches = cls, dict(fields), tuple(caches)
        self.attributes = {attr: name for name, attr in self.fields.items()}
        self.reset, self.derived, self.finish = reset or {}, tuple(derived), finish

    def state(self, obj):
        """{field name: value} of ``obj``; refuses an attribute the schema does not list."""
        attrs = ({f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
                 if dataclasses.is_dataclass(obj) else dict(vars(obj)))
        unknown = sorted(set(attrs) - set(self.attributes) - set(self.derived)
                         - set(self.caches))
        if unknown:
            raise TypeError(
                f"sklaplace.io cannot save a {type(obj).__name__} with the attributes "
                f"{unknown}: its saved state does not declare them (sklaplace._persist_schema."
                "TYPES). No partial file is written; pickle the estimator (joblib) instead.")
        return {name: attrs[attr] for name, attr in self.fields.items() if attr in attrs}

    def build(self, state):
        """The object of a state {field name: value}."""
        unknown = sorted(set(state) - set(self.fields))
        if unknown:
            raise Refused(f"a saved {self.cls.__name__} has unknown fields {unknown}"[:300])
        attrs = {self.fields[name]: value for name, value in state.items()}
        if dataclasses.is_dataclass(self.cls):
            return self.cls(**attrs)
        obj = self.cls.__new__(self.cls)
        obj.__dict__.update(attrs)
        obj.__dict__.update(self.reset)
        if self.finish is not None:
            self.finish(obj)
        return obj


def _finish_last_layer(obj):
    obj.layer = obj.module.get_submodule(obj.layer_name)
    obj.body = feature_body(obj.module, obj.layer_name)


def _same(*names):
    return {name: name for name in names}


_SUBSET = {"network": "module", "parameter_names": "names", "parameter_shapes": "shapes",
           "map_weights": "theta", "n_params": "n_params", "net_index": "whole_index",
           "prior_group_index": "group_index"}
_EVIDENCE = {"posterior": "posterior", "map_weights": "theta", "temperature": "temperature",
             "n_rows": "n_rows", "sum_squared_residuals": "sse",
             "negative_log_likelihood": "nll", "curvature": "curvature",
             "posterior_at_output_scale": "rebuild"}
_EVIDENCE_CACHES = ("_sums_cache", "_index_cache")

#: The types of a fitted estimator's state, by the name written in the file: each type's
#: class, and {field name: attribute}.
TYPES = {
    "laplace": Spec(FittedLaplace, {
        "likelihood": "likelihood", "subset": "subset", "posterior": "posterior",
        "evidence": "evidence", "hyperparameters": "hyper", "subset_of_weights": "kind",
        "hessian_structure": "structure", "hyperparameter_tuning": "tuning",
        "n_outputs": "n_outputs", "curvature": "curvature", "temperature": "temperature",
        "prediction_seed": "prediction_seed", "target_scale": "targets",
        "refined": "refined", "task_rows": "task_rows", "n_tasks": "n_tasks",
        "report": "report", "outside_variance": "outside"}),
    "hyperparameters": Spec(Hyperparameters, {
        "prior_precision": "prior_precision", "sigma_noise": "sigma",
        "outside_variance": "outside_variance"}),
    "target_scale": Spec(TargetScale, {"mean": "mean", "std": "std",
                                       "normalizes": "normalizes", "ndim": "ndim"}),
    "outside/range_kernel": Spec(RangeKernel, {"low": "low", "high": "high", "scale": "scale",
                                               "variance": "variance"}),
    # the likelihoods: stateless
    "likelihood/categorical": Spec(likelihoods.Categorical, {}),
    "likelihood/bernoulli": Spec(likelihoods.Bernoulli, {}),
    "likelihood/multilabel": Spec(likelihoods.Multilabel, {}),
    "likelihood/gaussian": Spec(likelihoods.Gaussian, {}),
    "likelihood/heteroscedastic_gaussian": Spec(likelihoods.HeteroscedasticGaussian, {}),
    "subset/all_weights": Spec(AllWeights, _SUBSET, caches=("_linear_cache",)),
    "subset/last_layer": Spec(LastLayer, {**_SUBSET, **_same(
        "layer_name", "has_bias", "const_bias", "n_features", "map_weight", "map_bias"),
        "n_outputs": "n_out"}, derived=("layer", "body"), finish=_finish_last_layer),
    "subset/subnetwork": Spec(Subnetwork, {**_SUBSET, "all_weights": "_all",
                                           "indices": "indices"}),
    "subset/refined": Spec(RefinedSubset, {
        "base_subset": "base", "map_weights": "theta", "shift": "shift",
        "subset_of_weights": "kind", "network": "module", "n_params": "n_params",
        "net_index": "whole_index", "prior_group_index": "group_index"}),
    "posterior/eigen": Spec(EigenPosterior, {
        "eigenvectors": "V", "eigenvalues": "lam", "n_params": "n_params",
        "structure": "structure", "prior_std": "_d_inv_sqrt",
        "whitened_eigenvectors": "_Q", "whitened_eigenvalues": "_omega2"},
        caches=("_gram_cache", "_index_cache")),
    "posterior/diag": Spec(DiagPosterior, {"curvature_diagonal": "h", "n_params": "n_params",
                                           "posterior_variance": "_var"}),
    "posterior/kron": Spec(KronPosterior, {"n_params": "n_params", "kronecker_blocks": "blocks",
                                           "eigenbasis_variances": "_inv"},
                           caches=("_single_output_root", "_bias_cov_cache"),
                           reset={"_single_output_root": None, "_bias_cov_cache": None}),
    "evidence": Spec(Evidence, _EVIDENCE, caches=_EVIDENCE_CACHES),
    "evidence/task": Spec(TaskEvidence, {
        **_EVIDENCE, "previous_posterior": "prior_posterior", "prior_mean": "prior_mean",
        "previous_curvature_quadratic": "_curvature_quadratic", "squared_shift": "_d2"},
        caches=_EVIDENCE_CACHES),
}

#: Functions a saved ``functools.partial`` may call, by the name written in the file: the
#: posterior of the fit's curvature at another output scale (a per-output σ).
FUNCTIONS = {"laplace/posterior_at_output_scale": _build_posterior}


#: What a file holds of a trained skorch net besides its parameters: {field: attribute}
#: (the standardization its outputs are in, under ``normalize_y``; skorch's own flag).
NET_FIELDS = {"target_scaling": TARGET_SCALING, "classes_inferred": "classes_inferred_"}


@functools.cache
def classes():
    """sklaplace's classes that a file names as a parameter, by the name it gives them."""
    from ._laplace import nets, optim
    from ._laplace.online import OnlineEvidence

    return {f"sklaplace:{cls.__name__}": cls for cls in (
        nets.MLP, nets.RowSlices, nets.MAPLoss, nets.HeteroscedasticGaussianNLLLoss,
        optim.Adam, optim.LBFGS, OnlineEvidence)}


# ---------------------------------------------------------------- format version 1
# (frozen: the names version 1 wrote, never changed with the code)
_V1_TYPES = {
    "FittedLaplace": "laplace", "Hyperparameters": "hyperparameters",
    "TargetScale": "target_scale", "RangeKernel": "outside/range_kernel",
    "Categorical": "likelihood/categorical", "Bernoulli": "likelihood/bernoulli",
    "Multilabel": "likelihood/multilabel", "Gaussian": "likelihood/gaussian",
    "HeteroscedasticGaussian": "likelihood/heteroscedastic_gaussian",
    "AllWeights": "subset/all_weights", "LastLayer": "subset/last_layer",
    "Subnetwork": "subset/subnetwork", "RefinedSubset": "subset/refined",
    "EigenPosterior": "posterior/eigen", "DiagPosterior": "posterior/diag",
    "KronPosterior": "posterior/kron", "Evidence": "evidence", "TaskEvidence": "evidence/task",
}
_V1_SUBSET = {"module": "network", "names": "parameter_names", "shapes": "parameter_shapes",
              "theta": "map_weights", "n_params": "n_params", "whole_index": "net_index",
              "group_index": "prior_group_index"}
_V1_EVIDENCE = {"posterior": "posterior", "theta": "map_weights", "temperature": "temperature",
                "n_rows": "n_rows", "sse": "sum_squared_residuals",
                "nll": "negative_log_likelihood", "curvature": "curvature",
                "rebuild": "posterior_at_output_scale"}
#: v2 type → {version-1 attribute: field}; a type not listed kept its names
_V1_FIELDS = {
    "laplace": {"hyper": "hyperparameters", "kind": "subset_of_weights",
                "structure": "hessian_structure", "tuning": "hyperparameter_tuning",
                "targets": "target_scale", "outside": "outside_variance"},
    "hyperparameters": {"sigma": "sigma_noise"},
    "subset/all_weights": _V1_SUBSET,
    "subset/last_layer": {**_V1_SUBSET, "n_out": "n_outputs"},
    "subset/subnetwork": {**_V1_SUBSET, "_all": "all_weights"},
    "subset/refined": {"base": "base_subset", "theta": "map_weights", "kind": "subset_of_weights",
                       "module": "network", "whole_index": "net_index",
                       "group_index": "prior_group_index"},
    "posterior/eigen": {"V": "eigenvectors", "lam": "eigenvalues", "_d_inv_sqrt": "prior_std",
                        "_Q": "whitened_eigenvectors", "_omega2": "whitened_eigenvalues"},
    "posterior/diag": {"h": "curvature_diagonal", "_var": "posterior_variance"},
    "posterior/kron": {"blocks": "kronecker_blocks", "_inv": "eigenbasis_variances"},
    "evidence": _V1_EVIDENCE,
    "evidence/task": {**_V1_EVIDENCE, "prior_posterior": "previous_posterior",
                      "_curvature_quadratic": "previous_curvature_quadratic",
                      "_d2": "squared_shift"},
}
_V1_FUNCTIONS = {  # (the second: its path before the estimators' package)
    "sklaplace.estimators._fitting._build_posterior": "laplace/posterior_at_output_scale",
    "sklaplace._fitting._build_posterior": "laplace/posterior_at_output_scale",
}
_V1_NET_FIELDS = {"sklaplace_target_scaling_": "target_scaling",
                  "classes_inferred_": "classes_inferred"}
_V1_CLASSES = {f"sklaplace._laplace.{path}": f"sklaplace:{path.partition(':')[2]}" for path in (
    "nets:MLP", "nets:RowSlices", "nets:MAPLoss", "nets:HeteroscedasticGaussianNLLLoss",
    "optim:Adam", "optim:LBFGS", "online:OnlineEvidence")}


def from_version_1(doc):
    """The version-2 document of a version-1 document (changed in place). What version 1
    did not write is left as it is, for the checks of version 2 to refuse."""
    stack = [doc]
    while stack:  # (the document's depth is checked before)
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(value)
            continue
        if not isinstance(value, dict):
            continue
        tag = next(iter(value), None)
        name = value.get(tag)
        if tag == "$object" and isinstance(name, str):
            value[tag] = _V1_TYPES.get(name, name)
            state, renames = value.get("state"), _V1_FIELDS.get(value[tag], {})
            if isinstance(state, dict):
                value["state"] = {renames.get(k, k): v for k, v in state.items()}
                if len(value["state"]) != len(state):
                    raise Refused(f"a saved {name} has a field twice"[:200])
        elif tag == "$partial" and isinstance(name, str):
            value[tag] = _V1_FUNCTIONS.get(name, name)
        elif tag in ("$class", "$instance") and isinstance(name, str):
            value[tag] = _V1_CLASSES.get(name, name)
        elif tag == "$net" and isinstance(value.get("attributes"), dict):
            value["attributes"] = {_V1_NET_FIELDS.get(k, k): v
                                   for k, v in value["attributes"].items()}
        stack.extend(value.values())
    return doc
