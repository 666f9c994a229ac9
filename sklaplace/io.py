"""Save and load fitted estimators in a file whose loading runs no code.

:func:`save` writes one file, a zip archive of a JSON document (the constructor
parameters, the fitted attributes, the specification of the networks) and ``.npy``
arrays (the weights, the posterior, the evidence…); :func:`load` reads it back with
``numpy.load(allow_pickle=False)`` and builds only the types sklaplace writes. Nothing
is unpickled: a file holding a pickle stream, an object array or an unknown type is
refused with a ``ValueError``. Use it to share models; ``pickle``/``joblib`` remain
for ``clone``, caching and multiprocessing, and must only load files you trust.

Networks are rebuilt from their specification, never from the file: sklaplace's
default MLP from its sizes; a module of your own from the factory you pass to
:func:`load` under the name it was saved with (``module_name``, by default the class's
qualified name). Parameters that are classes (skorch's ``module``, ``criterion``,
``optimizer``, ``iterator_train``…) are stored by name and resolved only from
``torch.nn``, ``torch.optim``, ``torch.utils.data``, ``skorch`` and sklaplace, or from
``modules``.
"""

import importlib
import io as _io
import json
import warnings
import zipfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from . import __version__
from ._laplace.workflow import MODULE_IN_USE
from ._persist import Reader, Writer

__all__ = ["save", "load"]

#: Version of the file format; :func:`load` refuses files of a later version.
FORMAT_VERSION = 1

_DOCUMENT = "sklaplace.json"
_FORMAT = "sklaplace-model"
_ALLOWED = ("torch.nn", "torch.optim", "torch.utils.data", "skorch", "sklaplace")
_NET_ATTRIBUTES = ("sklaplace_target_scaling_", "classes_inferred_")


def _estimators():
    from .classifier import LaplaceClassifier
    from .regressor import LaplaceRegressor

    return {"LaplaceClassifier": LaplaceClassifier, "LaplaceRegressor": LaplaceRegressor}


def _allowed(module):
    return any(module == p or module.startswith(p + ".") for p in _ALLOWED)


def _resolve_class(name):
    """The class of a ``module:qualname`` name in the allowlisted packages, else None."""
    module, _, qualname = name.partition(":")
    if not _allowed(module) or "<" in qualname:
        return None
    try:
        obj = importlib.import_module(module)
    except ImportError:
        return None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if not isinstance(obj, type) or obj.__module__ != module or obj.__qualname__ != qualname:
        return None
    return obj


def _class_name(cls):
    return f"{cls.__module__}:{cls.__qualname__}"


# ---------------------------------------------------------------- writing
class _ParamWriter(Writer):
    """:class:`~._persist.Writer` with what parameters hold: classes by name (allowlisted,
    or a user's name), skorch nets, ``FrozenEstimator``, callbacks, ``Memory``."""

    def __init__(self, module_name):
        super().__init__(self._module_ref)
        self.module_name, self.modules, self._nets, self._roots = module_name, [], {}, []

    def _module_ref(self, module):
        for index, root in self._roots:
            if module is root:
                return index
        for index, root in self._roots:
            for path, sub in root.named_modules():
                if sub is module:
                    self.modules.append({"source": "submodule", "of": index, "path": path})
                    return len(self.modules) - 1
        for index, root in self._roots:
            if type(module) is type(root) and [k for k, _ in module.state_dict().items()] == [
                    k for k, _ in root.state_dict().items()]:
                return self._root(module, {"source": "copy", "of": index})
        raise TypeError(
            f"sklaplace.io cannot save the network {type(module).__qualname__}: it is not the "
            "estimator's net (net_.module_) or a copy of it.")

    def _root(self, module, entry):
        params = list(module.parameters())
        entry.update({
            "dtype": self(params[0].dtype if params else torch.get_default_dtype()),
            "state": {k: self(v) for k, v in module.state_dict().items()},
            "training": [m.training for _, m in module.named_modules()],
        })
        self.modules.append(entry)
        self._roots.append((len(self.modules) - 1, module))
        return len(self.modules) - 1

    def _class(self, cls, param):
        if _resolve_class(_class_name(cls)) is cls:
            return {"$class": _class_name(cls)}
        name = self.module_name if param == "module" and self.module_name else cls.__qualname__
        return {"$user": name}

    def _net(self, net):
        from skorch import NeuralNet

        if id(net) in self._nets:
            return {"$net_ref": self._nets[id(net)]}
        if not isinstance(net, NeuralNet) or _resolve_class(_class_name(type(net))) is None:
            raise TypeError(f"sklaplace.io saves skorch's own net classes, not "
                            f"{type(net).__qualname__}")
        self._nets[id(net)] = len(self._nets)
        self._keep(net)
        params = {}
        for key, value in net.get_params(deep=False).items():
            if key.startswith("_"):  # skorch's bookkeeping (_params_to_validate)
                continue
            if key == "module" and isinstance(value, nn.Module):
                raise TypeError("sklaplace.io saves a skorch net whose module is a class (or "
                                "factory) with module__ arguments, not a module instance")
            params[key] = self._param(value, key)
        out = {"$net": _class_name(type(net)), "id": self._nets[id(net)], "params": params}
        if getattr(net, "initialized_", False):
            out["module"] = self._root(net.module_, {"source": "net"})
            out["history"] = self(list(net.history))
            out["attributes"] = {k: self(getattr(net, k)) for k in _NET_ATTRIBUTES
                                 if hasattr(net, k)}
        return out

    def _estimator(self, estimator):
        """The parameters and fitted attributes of the file's estimator, or of a candidate."""
        params, state = estimator.get_params(deep=False), vars(estimator)
        order = sorted(set(state) - set(params), key=lambda k: (k != "net_", k != "laplace_", k))
        return {"params": {k: self._param(v, k) for k, v in params.items()},  # nets first:
                "attributes": {k: self._param(state[k], k) for k in order}}

    def _param(self, value, key=None):
        from sklearn.frozen import FrozenEstimator
        from skorch import NeuralNet

        if type(value) in _estimators().values():  # a fitted candidate (estimators_)
            return {"$estimator": type(value).__name__, **self._estimator(value)}
        if isinstance(value, type):
            return self._class(value, key)
        if isinstance(value, NeuralNet):
            return self._net(value)
        if isinstance(value, FrozenEstimator):
            return {"$frozen": self._net(value.estimator)}
        if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
            items = [self._param(v) for v in value]
            return items if type(value) is list else {"$tuple": items}
        if isinstance(value, dict) and type(value) is dict:
            return {"$dict": [[self(k), self._param(v)] for k, v in value.items()]}
        if hasattr(value, "cache") and hasattr(value, "location"):  # joblib.Memory
            return {"$memory": value.location}
        if hasattr(value, "get_params") and _resolve_class(_class_name(type(value))):
            return {"$instance": _class_name(type(value)),
                    "params": {k: self._param(v) for k, v in
                               value.get_params(deep=False).items()}}
        if isinstance(value, np.ndarray) and value.dtype.kind in "USO" and all(
                isinstance(v, str) for v in value.ravel()):
            return {"$strings": value.tolist(), "object": value.dtype.kind == "O"}
        if callable(value) and not isinstance(value, (nn.Module, torch.Tensor, np.ndarray)):
            raise TypeError(
                f"sklaplace.io cannot save the parameter {key!r}: a callable "
                f"({value!r}) is stored only as a class of torch.nn, torch.optim, skorch or "
                "sklaplace, or a class of your own loaded with modules=")
        return self(value)


def save(estimator, path, module_name=None):
    """Save a fitted (or unfitted) estimator to a file that loads without running code.

    Parameters
    ----------
    estimator : LaplaceClassifier or LaplaceRegressor
        The estimator, fitted or not.
    path : str or path-like
        The file to write (a zip archive of JSON and ``.npy`` arrays).
    module_name : str or None, default=None
        The name under which the module class of your own skorch net is saved, the key
        of its factory in :func:`load`'s ``modules``. ``None``: the class's qualified
        name. Unused with the default MLP.

    Returns
    -------
    path : pathlib.Path
        The file written.

    See Also
    --------
    load : Read the file back.
    """
    if type(estimator).__name__ not in _estimators() or type(estimator) is not _estimators()[
            type(estimator).__name__]:
        raise TypeError(f"sklaplace.io.save saves LaplaceClassifier and LaplaceRegressor "
                        f"estimators, not {type(estimator).__qualname__}")
    if module_name is not None and not isinstance(module_name, str):
        raise TypeError(f"module_name must be a str or None, got {module_name!r}")
    writer = _ParamWriter(module_name)
    with MODULE_IN_USE:  # not while a prediction in another thread borrows a fitted module
        state = writer._estimator(estimator)
    doc = {"format": _FORMAT, "version": FORMAT_VERSION, "sklaplace": __version__,
           "estimator": type(estimator).__name__, **state}
    doc["modules"] = writer.modules
    path = Path(path)
    buffer = _io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(_DOCUMENT, json.dumps(doc))
        for key, array in writer.arrays.items():
            data = _io.BytesIO()
            np.save(data, array, allow_pickle=False)
            archive.writestr(f"arrays/{key}.npy", data.getvalue())
    path.write_bytes(buffer.getvalue())  # whole or not at all: no partial file
    return path


# ---------------------------------------------------------------- reading
def _refuse(path, why):
    return ValueError(f"{path} is not a model file sklaplace.io can load: {why}. Nothing in "
                      "it was run.")


def _read_archive(path):
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        with open(path, "rb") as f:
            head = f.read(2)
        why = ("it is a pickle stream (joblib or pickle), which sklaplace.io never loads"
               if head[:1] == b"\x80" else "it is not a zip archive written by sklaplace.io.save")
        raise _refuse(path, why) from None
    with archive:
        names = archive.namelist()
        if _DOCUMENT not in names:
            pickled = [n for n in names if n.endswith(".pkl")]
            raise _refuse(path, f"it holds {pickled[0]!r}, a pickle stream (torch.save?)"
                          if pickled else f"it has no {_DOCUMENT}")
        doc = json.loads(archive.read(_DOCUMENT).decode("utf-8"))
        arrays = {}
        for name in names:
            if name == _DOCUMENT:
                continue
            if not (name.startswith("arrays/") and name.endswith(".npy")):
                raise _refuse(path, f"it holds {name!r}, which is not part of the format")
            try:
                arrays[name[7:-4]] = np.load(_io.BytesIO(archive.read(name)), allow_pickle=False)
            except ValueError as error:
                raise _refuse(path, f"{name} is not a plain numeric array ({error})") from None
            if arrays[name[7:-4]].dtype.kind not in "biufUS":
                raise _refuse(path, f"{name} has dtype {arrays[name[7:-4]].dtype}")
    return doc, arrays


def _check_version(path, doc):
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
        raise _refuse(path, "its document is not a sklaplace model")
    version = doc.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(
            f"{path} was saved by sklaplace {doc.get('sklaplace')} in format version "
            f"{version}; this sklaplace ({__version__}) reads versions up to {FORMAT_VERSION}. "
            "Upgrade sklaplace to load it.")
    if version < 1:
        raise ValueError(f"{path} has format version {version}, which no sklaplace wrote.")


class _ParamReader(Reader):
    def __init__(self, arrays, doc, modules, device):
        super().__init__(arrays, self._module, device)
        self._entries, self._built, self._nets = doc.get("modules", []), {}, {}
        self._factories, self._device_arg = dict(modules or {}), device

    def _user(self, name):
        if name not in self._factories:
            raise ValueError(
                f"The model file needs the module {name!r}, a class of your own: pass its "
                f"factory, load(path, modules={{{name!r}: MyModule}}). The file holds its "
                "weights only; sklaplace.io never builds code from the file.")
        return self._factories[name]

    def _module(self, index):
        if index in self._built:
            return self._built[index]
        entry = self._entries[index]
        source = entry.get("source")
        if source == "submodule":
            module = self._module(entry["of"]).get_submodule(entry["path"])
        elif source == "copy":
            import copy

            module = copy.deepcopy(self._module(entry["of"]))
            self._load_module(module, entry)
        else:
            raise ValueError("the model file refers to a network before its net")
        self._built[index] = module
        return module

    def _load_module(self, module, entry):
        state = {k: self(v) for k, v in entry["state"].items()}
        dtype = self(entry["dtype"])
        module.to(dtype)
        first = next(iter(state.values()), None)
        if first is not None:
            module.to(first.device)
        module.load_state_dict(state, strict=True)
        flags = entry["training"]
        for (_, sub), flag in zip(module.named_modules(), flags):
            sub.training = bool(flag)

    def _net(self, value):
        from skorch.history import History

        from ._laplace.threads import seeded

        cls = _resolve_class(value["$net"])
        if cls is None:
            raise TypeError(f"unknown net class {value['$net']!r} in the model file; refused")
        params = {k: self._param(v) for k, v in value["params"].items()}
        if self._device_arg is not None and "device" in params:
            params["device"] = str(self._device_arg)
        net = cls(**params)
        self._nets[value["id"]] = net
        if "module" in value:
            with warnings.catch_warnings(), seeded(0):  # no draw from the user's generator
                warnings.simplefilter("ignore")
                net.initialize()
            entry = self._entries[value["module"]]
            self._load_module(net.module_, entry)
            self._built[value["module"]] = net.module_
            net.history = History(self(value["history"]))
            for key, item in value["attributes"].items():
                setattr(net, key, self(item))
        return net

    def _estimator(self, cls, value):
        params = {k: self._param(v) for k, v in value["params"].items()}
        if self._device_arg is not None and params.get("net") is None:
            params["device"] = str(self._device_arg)
        estimator = cls(**params)  # the attributes in the file's order (nets first)
        vars(estimator).update({k: self._param(v) for k, v in value["attributes"].items()})
        return estimator

    def _param(self, value):
        from sklearn.frozen import FrozenEstimator
        from sklearn.utils.validation import check_memory

        if isinstance(value, list):
            return [self._param(v) for v in value]
        if not isinstance(value, dict) or not value:
            return self(value)
        tag = next(iter(value))
        if tag == "$class":
            cls = _resolve_class(value["$class"])
            if cls is None:
                raise TypeError(f"the model file names the class {value['$class']!r}, outside "
                                "torch.nn, torch.optim, torch.utils.data, skorch and sklaplace; "
                                "refused")
            return cls
        if tag == "$user":
            return self._user(value["$user"])
        if tag == "$net":
            return self._net(value)
        if tag == "$net_ref":
            return self._nets[value["$net_ref"]]
        if tag == "$frozen":
            return FrozenEstimator(self._param(value["$frozen"]))
        if tag == "$tuple":
            return tuple(self._param(v) for v in value["$tuple"])
        if tag == "$dict":
            return {self(k): self._param(v) for k, v in value["$dict"]}
        if tag == "$memory":
            return check_memory(value["$memory"])
        if tag == "$strings":
            return np.asarray(value["$strings"], dtype=object if value.get("object") else None)
        if tag == "$estimator" and value["$estimator"] in _estimators():
            return self._estimator(_estimators()[value["$estimator"]], value)
        if tag == "$instance":
            cls = _resolve_class(value["$instance"])
            if cls is None:
                raise TypeError(f"unknown class {value['$instance']!r} in the model file; "
                                "refused")
            return cls(**{k: self._param(v) for k, v in value["params"].items()})
        return self(value)


def load(path, modules=None, device=None):
    """Load an estimator saved by :func:`save`, running no code from the file.

    Parameters
    ----------
    path : str or path-like
        The file written by :func:`save`.
    modules : dict of str to callable or None, default=None
        Factories of your own module classes, under the names they were saved with
        (``module_name``, by default the class's qualified name): called as the class
        would be, with the skorch net's ``module__`` arguments. Not needed for the
        default MLP.
    device : str, torch.device or None, default=None
        Where the fitted tensors and networks go (and the estimator's ``device``). ``None``:
        where they were saved, or the CPU where torch has no CUDA (with a warning).

    Returns
    -------
    estimator : LaplaceClassifier or LaplaceRegressor
        The estimator, predicting as the saved one did.

    Raises
    ------
    ValueError
        If the file holds a pickle stream, an object array or an unknown type, was saved
        in a later format version, or needs a module factory not in ``modules``.

    See Also
    --------
    save : Write the file.
    """
    if modules is not None and (not isinstance(modules, dict)
                                or not all(callable(v) for v in modules.values())):
        raise TypeError("modules must be a dict of names to module factories (callables)")
    doc, arrays = _read_archive(path)
    _check_version(path, doc)
    cls = _estimators().get(doc.get("estimator"))
    if cls is None:
        raise _refuse(path, f"unknown estimator {doc.get('estimator')!r}")
    reader = _ParamReader(arrays, doc, modules, device)
    try:
        estimator = reader._estimator(cls, doc)
    except (KeyError, IndexError, AttributeError) as error:
        raise _refuse(path, f"its document is malformed ({error!r})") from None
    if reader.mapped:
        warnings.warn(
            f"This {cls.__name__} was saved on {reader.mapped[0]!r}, but torch has no CUDA "
            "device here: its tensors were loaded onto the CPU (predictions are the same "
            "numbers). Pass device='cpu' to load to say so.", UserWarning)
    return estimator

