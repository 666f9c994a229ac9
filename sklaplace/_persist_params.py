"""What a model file says of the estimator's parameters and networks (:mod:`sklaplace.io`).

The constructor parameters and fitted attributes go through the fitted state's types of
:mod:`sklaplace._persist`; here are the values only parameters hold: classes by an
allowlisted name (or the name of a user's module factory), skorch nets by their
specification, ``FrozenEstimator``, callbacks, fitted candidates of ``model_averaging``.
Reading builds only these, after :func:`~._persist_allowed.check_document` has checked
each against its class's table; nothing is unpickled. A net's module is built on the meta
device first, so that the memory of the one ``net.initialize()`` builds is the file's.
"""

import importlib
import warnings

import numpy as np
import torch
from torch import nn

from ._persist import Reader, Refused, Writer
from ._persist_allowed import _estimators, class_name
from ._persist_schema import NET_FIELDS, classes

_ALLOWED = ("torch.nn", "torch.optim", "torch.utils.data", "skorch")  # (sklaplace's: the schema)


def _allowed(module):
    return any(module == p or module.startswith(p + ".") for p in _ALLOWED)


def _resolve_class(name):
    """The class of a name of the schema (sklaplace's classes) or of a ``module:qualname``
    name in the allowlisted packages, else None."""
    if name in classes():
        return classes()[name]
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


# ---------------------------------------------------------------- writing
class _ParamWriter(Writer):
    """:class:`~._persist.Writer` with what parameters hold: classes by name (allowlisted,
    or a user's name), skorch nets, ``FrozenEstimator``, callbacks; never ``memory``."""

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
        if _resolve_class(class_name(cls)) is cls:
            return {"$class": class_name(cls)}
        name = self.module_name if param == "module" and self.module_name else cls.__qualname__
        return {"$user": name}

    def _net(self, net):
        from skorch import NeuralNet

        if id(net) in self._nets:
            return {"$net_ref": self._nets[id(net)]}
        if not isinstance(net, NeuralNet) or _resolve_class(class_name(type(net))) is None:
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
        out = {"$net": class_name(type(net)), "id": self._nets[id(net)], "params": params}
        if getattr(net, "initialized_", False):
            out["module"] = self._root(net.module_, {"source": "net"})
            out["history"] = self(list(net.history))
            out["attributes"] = {field: self(getattr(net, attr))
                                 for field, attr in NET_FIELDS.items() if hasattr(net, attr)}
        return out

    def _estimator(self, estimator):
        """The parameters and fitted attributes of the file's estimator, or of a candidate."""
        params, state = estimator.get_params(deep=False), vars(estimator)
        order = sorted(set(state) - set(params), key=lambda k: (k != "net_", k != "laplace_", k))
        # memory: a cache directory of this machine, not part of the model; never written
        return {"params": {k: None if k == "memory" else self._param(v, k)  # nets first:
                           for k, v in params.items()},
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
        if hasattr(value, "get_params") and _resolve_class(class_name(type(value))):
            return {"$instance": class_name(type(value)),
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

            source = self._module(entry["of"])
            self.spend(sum(t.nbytes for t in source.state_dict().values()), "a network")
            module = copy.deepcopy(source)
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
            entry = self._entries[value["module"]]
            self._check_module(net, entry, value["params"]["module"])
            with warnings.catch_warnings(), seeded(0):  # no draw from the user's generator
                warnings.simplefilter("ignore")
                net.initialize()
            self._load_module(net.module_, entry)
            self._built[value["module"]] = net.module_
            net.history = History(self(value["history"]))
            for field, item in value["attributes"].items():  # (checked: NET_FIELDS only)
                setattr(net, NET_FIELDS[field], self(item))
        return net

    def _check_module(self, net, entry, spec):
        """Refuse a net whose module, as its parameters build it, is not the one whose
        weights the file holds: built on the meta device, it allocates nothing."""
        from ._laplace.threads import seeded

        saved = {k: self.shape(v) for k, v in entry["state"].items()}
        kwargs = net.get_params_for("module")
        try:
            with warnings.catch_warnings(), seeded(0), torch.device("meta"):
                warnings.simplefilter("ignore")
                built = {k: tuple(v.shape) for k, v in net.module(**kwargs).state_dict().items()}
        except (RuntimeError, NotImplementedError, TypeError, ValueError) as error:
            if "$user" in spec:  # a factory of the user's that needs real tensors
                return
            raise Refused(f"its net's module does not build from its parameters "
                          f"({error})"[:300]) from None
        if built != saved:
            key = next((k for k in built if saved.get(k) != built[k]), None)
            diff = (f"{key}: {built[key]} against {saved.get(key)}" if key is not None
                    else f"the tensors {sorted(set(saved) - set(built))}")
            raise Refused(f"its net's parameters ({kwargs})"[:200] + " build a module that is "
                          f"not the one whose weights it holds ({diff})"[:200])
        self.spend(sum(self.array(v["$tensor"]).nbytes for v in entry["state"].values()),
                   "a network")

    def _estimator(self, cls, value):
        params = {k: self._param(v) for k, v in value["params"].items()}
        if self._device_arg is not None and params.get("net") is None:
            params["device"] = str(self._device_arg)
        estimator = cls(**params)  # the attributes in the file's order (nets first)
        vars(estimator).update({k: self._param(v) for k, v in value["attributes"].items()})
        return estimator

    def _param(self, value):
        from sklearn.frozen import FrozenEstimator

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
