"""What a model file may rebuild (:mod:`sklaplace.io`): each class by its exact name, with
the parameters allowed for it.

:func:`check_document` walks a model file's document before anything in it is built and
refuses, with :class:`~._persist.Refused` naming the entry, every value outside these
tables. A skorch net's parameters are checked by position: the classes a net instantiates
(``module``, ``criterion``, ``optimizer``, the iterators, the dataset) come from the sets
of :func:`_tables` or from the user's ``modules``; its callbacks are instances of the
listed classes with the listed parameters; every other value is plain data (numbers,
strings, arrays, tuples, dicts). Nothing that reads or writes a path is in the tables:
not skorch's ``Checkpoint``, ``TrainEndCheckpoint`` or ``LoadInitState``, nor its
loggers (``TensorBoard``, ``MlflowLogger``, ``WandbLogger``, ``NeptuneLogger``,
``SacredLogger``), nor joblib's ``Memory`` (an estimator's ``memory`` is never
written), nor ``torch.compile`` (``compile=True``), which writes and runs compiled code.
"""

import functools
import inspect

from ._persist import FUNCTIONS, TYPES, Refused
from ._persist_schema import NET_FIELDS, classes

_DATA = frozenset({"$ndarray", "$scalar", "$tensor", "$tuple", "$dict", "$slice", "$device",
                   "$dtype", "$strings"})
_STATE = _DATA | {"$object", "$ref", "$module", "$partial"}
_TOP = {"format", "version", "sklaplace", "estimator", "params", "attributes", "modules",
        "arrays"}
_KINDS = {"module": "torch.nn's modules and sklaplace's MLP",
          "criterion": "torch.nn's losses and sklaplace's",
          "optimizer": "torch.optim's optimizers and sklaplace's",
          "iterator_train": "torch's DataLoader and sklaplace's RowSlices",
          "iterator_valid": "torch's DataLoader and sklaplace's RowSlices",
          "dataset": "skorch's Dataset"}
_WHAT = {"$class": "a class", "$user": "a class of your own", "$instance": "an object",
         "$net": "a skorch net", "$net_ref": "a skorch net", "$frozen": "a FrozenEstimator",
         "$estimator": "an estimator", "$memory": "a cache directory on the disk"}


def _estimators():
    from .estimators.classifier import LaplaceClassifier
    from .estimators.regressor import LaplaceRegressor

    return {"LaplaceClassifier": LaplaceClassifier, "LaplaceRegressor": LaplaceRegressor}


def class_name(cls):
    """The name a file gives a class: sklaplace's by the schema, others ``module:qualname``."""
    names = {c: name for name, c in classes().items()}
    return names.get(cls, f"{cls.__module__}:{cls.__qualname__}")


def _init_params(*classes):
    skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return frozenset(name for cls in classes
                     for name, p in inspect.signature(cls.__init__).parameters.items()
                     if p.kind not in skip and name != "self")


@functools.cache
def _tables():
    """The exact classes a file may name, by role, and the parameters of each."""
    import torch
    from skorch import NeuralNet, NeuralNetBinaryClassifier, NeuralNetClassifier
    from skorch import NeuralNetRegressor
    from skorch import callbacks as cb
    from skorch.callbacks.lr_scheduler import WarmRestartLR
    from skorch.dataset import Dataset
    from torch import nn
    from torch.optim import lr_scheduler as schedulers
    from torch.utils.data import DataLoader

    from ._laplace import nets, optim
    from ._laplace.online import OnlineEvidence

    def public(namespace, base):
        return [v for k, v in vars(namespace).items()
                if not k.startswith("_") and isinstance(v, type) and issubclass(v, base)]

    def names(classes):
        return frozenset(class_name(c) for c in classes)

    modules = names(public(nn, nn.Module) + [nets.MLP])
    iterators = names([DataLoader, nets.RowSlices])
    roles = {
        "module": modules,
        "criterion": names(public(nn, nn.modules.loss._Loss)
                           + [nets.MAPLoss, nets.HeteroscedasticGaussianNLLLoss]),
        "optimizer": names(public(torch.optim, torch.optim.Optimizer)
                           + [optim.Adam, optim.LBFGS]),
        "iterator_train": iterators, "iterator_valid": iterators,
        "dataset": names([Dataset]),
    }
    # the schedulers a file can configure whole (no callables, no other schedulers)
    needs_code = {schedulers.LambdaLR, schedulers.MultiplicativeLR, schedulers.SequentialLR,
                  schedulers.ChainedScheduler, schedulers.LRScheduler}
    policies = {c.__name__: c for c in public(schedulers, schedulers.LRScheduler)
                if c not in needs_code}
    policies["WarmRestartLR"] = WarmRestartLR
    callbacks = {class_name(c): frozenset(p) for c, p in [
        (cb.EpochTimer, ()),
        (cb.PassthroughScoring, ("name", "lower_is_better", "on_train")),
        (cb.EpochScoring, ("scoring", "lower_is_better", "on_train", "name", "use_caching")),
        (cb.PrintLog, ("keys_ignored", "tablefmt", "floatfmt", "stralign")),
        (cb.ProgressBar, ("batches_per_epoch", "detect_notebook", "postfix_keys")),
        (cb.GradientNormClipping, ("gradient_clip_value", "gradient_clip_norm_type")),
        (cb.LRScheduler, ("policy", "monitor", "event_name", "step_every")),
        (OnlineEvidence, _init_params(OnlineEvidence)),
    ]}
    defaults = {"epoch_timer": cb.EpochTimer, "train_loss": cb.PassthroughScoring,
                "valid_loss": cb.PassthroughScoring, "valid_acc": cb.EpochScoring,
                "print_log": cb.PrintLog}
    nets_ = {class_name(c): _init_params(*[k for k in c.__mro__ if issubclass(k, NeuralNet)])
             for c in (NeuralNet, NeuralNetClassifier, NeuralNetBinaryClassifier,
                       NeuralNetRegressor)}
    return dict(roles=roles, modules=modules, policies=policies, callbacks=callbacks,
                defaults={k: class_name(v) for k, v in defaults.items()}, nets=nets_,
                scheduler=class_name(cb.LRScheduler))


def check_document(doc):
    """Refuse anything in a model file's document outside the tables.

    Parameters
    ----------
    doc : dict
        The parsed document.

    Returns
    -------
    users : set of str
        The names of the module factories of the user's that the file needs.
    """
    checker = _Checker()
    unknown = sorted(set(doc) - _TOP)
    if unknown:
        raise Refused(f"its document has the unknown entry {unknown[0]!r}")
    checker.estimator(doc, "", doc.get("estimator"))
    for i, entry in enumerate(checker.list(doc.get("modules", []), "modules")):
        checker.network(entry, f"modules[{i}]")
    return checker.users


def _refuse(where, why):
    return Refused(f"{where or 'its document'}: {why}")


class _Checker:
    def __init__(self):
        self.t, self.users = _tables(), set()

    def dict(self, value, where):
        if not isinstance(value, dict):
            raise _refuse(where, "expected a mapping")
        return value

    def list(self, value, where):
        if not isinstance(value, list):
            raise _refuse(where, "expected a list")
        return value

    def estimator(self, value, where, name):
        cls = _estimators().get(name) if isinstance(name, str) else None
        if cls is None:
            raise _refuse(where, f"unknown estimator {name!r}"[:200])
        allowed = cls._get_param_names()
        for key, v in self.dict(value.get("params", {}), f"{where}params").items():
            w = f"{where}params.{key}"
            if key not in allowed:
                raise _refuse(w, f"{cls.__name__} has no parameter {key!r}"[:200])
            if key == "net":
                if v is not None:
                    self.net(v, w, frozen=True)
            elif key == "memory":
                if v is not None:
                    raise _refuse(w, "memory is a cache directory, a path on the disk, which "
                                     "a model file never sets")
            else:
                self.value(v, w, _DATA)
        for key, v in self.dict(value.get("attributes", {}), f"{where}attributes").items():
            w = f"{where}attributes.{key}"
            if not key.isidentifier() or key.startswith("__") or key in allowed or callable(
                    getattr(cls, key, None)):
                raise _refuse(w, f"{key!r} is not a fitted attribute of {cls.__name__}"[:200])
            if key == "net_":
                self.net(v, w)
            elif key == "estimators_":
                for i, sub in enumerate(self.list(v, w)):
                    sub = self.dict(sub, f"{w}[{i}]")
                    self.estimator(sub, f"{w}[{i}].", sub.get("$estimator"))
            else:
                self.value(v, w, _STATE)

    def net(self, value, where, frozen=False):
        value = self.dict(value, where)
        if "$net_ref" in value:
            if type(value["$net_ref"]) is not int:
                raise _refuse(where, "malformed reference to a net")
            return
        if frozen and "$frozen" in value:
            return self.net(value["$frozen"], f"{where}.$frozen")
        name = str(value.get("$net"))
        if "$net" not in value or name not in self.t["nets"]:
            raise _refuse(where, f"{name!r} is not a net class "
                                 "sklaplace.io rebuilds (skorch's NeuralNet, "
                                 "NeuralNetClassifier, NeuralNetBinaryClassifier and "
                                 "NeuralNetRegressor)"[:300])
        unknown = sorted(set(value) - {"$net", "id", "params", "module", "history",
                                       "attributes"})
        if unknown:
            raise _refuse(where, f"unknown entry {unknown[0]!r} of a skorch net"[:200])
        params, named = self.dict(value.get("params", {}), f"{where}.params"), {}
        for key, v in params.items():
            w = f"{where}.params.{key}"
            if key in self.t["roles"]:
                role = f"a skorch net's {key} ({_KINDS[key]})"
                self.klass(v, w, self.t["roles"][key], role)
            elif key == "callbacks":
                named = self.callbacks(v, w)
            elif key == "compile":
                if v is not False:
                    raise _refuse(w, "torch.compile writes compiled code to the disk and runs "
                                     "it; a model file never turns it on")
            elif key == "torch_load_kwargs":
                if v is not None:
                    raise _refuse(w, "how torch loads files is not a model file's to set")
            elif key in self.t["nets"][name]:
                self.value(v, w, _DATA)
            elif key.split("__")[0] in ("module", "criterion") and "__" in key:
                self.value(v, w, _DATA, classes=self.t["modules"])  # e.g. an activation
            elif key.split("__")[0] in ("optimizer", "iterator_train", "iterator_valid",
                                        "dataset") and "__" in key:
                self.value(v, w, _DATA)
            elif not key.startswith("callbacks__"):
                raise _refuse(w, f"{key!r} is not a parameter of a skorch net that sklaplace.io "
                                 "restores"[:200])
        named = {**{k: (v, self.t["callbacks"][v]) for k, v in self.t["defaults"].items()},
                 **named}
        for key, v in params.items():
            if key.startswith("callbacks__"):
                self.callback_param(key, v, f"{where}.params.{key}", named)
        for key, v in self.dict(value.get("attributes", {}), f"{where}.attributes").items():
            if key not in NET_FIELDS:
                raise _refuse(f"{where}.attributes.{key}", "not an attribute of a skorch net "
                                                           "that sklaplace.io restores")
            self.value(v, f"{where}.attributes.{key}", _STATE)
        self.value(value.get("history", []), f"{where}.history", _DATA)
        if "module" in value and type(value["module"]) is not int:
            raise _refuse(f"{where}.module", "malformed reference to a network")

    def klass(self, value, where, allowed, role):
        if isinstance(value, dict) and set(value) == {"$user"} and isinstance(
                value["$user"], str):
            self.users.add(value["$user"])
            return
        if not (isinstance(value, dict) and set(value) == {"$class"}):
            raise _refuse(where, f"expected a class for {role}")
        if str(value["$class"]) not in allowed:
            raise _refuse(where, f"the class {value['$class']!r} is not one sklaplace.io "
                                 f"rebuilds as {role}; a class of your own loads from "
                                 "load(..., modules=)"[:300])

    def callbacks(self, value, where):
        """Check a net's ``callbacks``; return {name: (class name, parameters allowed)}."""
        if value is None or value == "disable":
            return {}
        named = {}
        for i, item in enumerate(self.list(value, where)):
            w = f"{where}[{i}]"
            name = None
            if isinstance(item, dict) and set(item) == {"$tuple"}:
                pair = self.list(item["$tuple"], w)
                if len(pair) != 2 or not isinstance(pair[0], str):
                    raise _refuse(w, "expected a (name, callback) pair")
                name, item = pair
            cls, allowed = self.callback(item, w)
            named[name or cls.rpartition(":")[2].rpartition(".")[2]] = cls, allowed
        return named

    def callback(self, value, where):
        tag = next(iter(value), None) if isinstance(value, dict) else None
        name = str(value[tag]) if tag in ("$instance", "$class") else None
        if name not in self.t["callbacks"]:
            shown = name or _WHAT.get(tag, repr(value)[:80])
            raise _refuse(where, f"{shown} is not a callback sklaplace.io restores: only "
                          "skorch's EpochTimer, PassthroughScoring, EpochScoring, PrintLog, "
                          "ProgressBar, GradientNormClipping and LRScheduler, and sklaplace's "
                          "own; callbacks that read or write files (checkpoints, loggers) "
                          "are never restored from a file")
        params = self.dict(value.get("params", {}), f"{where}.params")
        allowed = self.allowed(name, params, where)
        if tag == "$instance":
            for key, v in params.items():
                if key not in allowed:
                    raise _refuse(f"{where}.params.{key}",
                                  f"{key!r} is not a parameter of {name} that sklaplace.io "
                                  "restores"[:200])
                if key != "policy":
                    self.value(v, f"{where}.params.{key}", _DATA)
        return name, allowed

    def allowed(self, name, params, where):
        """The parameters allowed for the callback ``name``; an LRScheduler's policy."""
        allowed = self.t["callbacks"][name]
        if name != self.t["scheduler"]:
            return allowed
        policy, policies = params.get("policy", "WarmRestartLR"), self.t["policies"]
        by_class = {class_name(c): c for c in policies.values()}
        if isinstance(policy, str) and policy in policies:
            cls = policies[policy]
        elif isinstance(policy, dict) and set(policy) == {"$class"} and str(
                policy["$class"]) in by_class:
            cls = by_class[str(policy["$class"])]
        else:
            raise _refuse(f"{where}.params.policy", f"{policy!r} is not a learning-rate "
                          "schedule sklaplace.io restores"[:200])
        return allowed | (_init_params(cls) - {"optimizer"})

    def callback_param(self, key, value, where, named):
        parts = key.split("__")
        if len(parts) not in (2, 3) or parts[1] not in named:
            raise _refuse(where, f"{key!r} sets no callback of the net that sklaplace.io "
                                 "restores"[:200])
        if len(parts) == 2:  # the callback replaced, or None: turned off
            if value is not None:
                self.callback(value, where)
        elif parts[2] not in named[parts[1]][1] or parts[2] == "policy":
            raise _refuse(where, f"{parts[2]!r} is not a parameter of {named[parts[1]][0]} "
                                 "that a model file sets"[:200])
        else:
            self.value(value, where, _DATA)

    def network(self, entry, where):
        entry = self.dict(entry, where)
        if entry.get("source") not in ("net", "copy", "submodule"):
            raise _refuse(where, "unknown kind of network")
        for key in ("of", "path", "dtype", "training"):
            if key in entry:
                self.value(entry[key], f"{where}.{key}", _DATA)
        for key, v in self.dict(entry.get("state", {}), f"{where}.state").items():
            if not (isinstance(v, dict) and next(iter(v), None) == "$tensor"):
                raise _refuse(f"{where}.state.{key}", "expected a tensor")

    def value(self, value, where, tags, classes=None):
        """Plain data (``tags``: the tagged values allowed), recursively; ``classes``:
        the class names allowed inside (or a class of the user's)."""
        if value is None or isinstance(value, (bool, int, float, str)):
            return
        if isinstance(value, list):
            for i, item in enumerate(value):
                self.value(item, f"{where}[{i}]", tags, classes)
            return
        tag = next(iter(value), None) if isinstance(value, dict) else None
        if classes is not None and tag in ("$class", "$user"):
            role = f"an argument of a module ({_KINDS['module']})"
            return self.klass(value, where, classes, role)
        if tag not in tags:
            what = _WHAT.get(tag, f"the value {value!r}"[:100])
            raise _refuse(where, f"{what} is not restored here from a model file")
        if tag == "$object" and value[tag] not in TYPES:
            raise _refuse(where, f"the model file holds an unknown type {value[tag]!r}; refused "
                                 "(sklaplace.io reads only the types it writes)"[:300])
        if tag == "$partial" and value[tag] not in FUNCTIONS:
            raise _refuse(where, f"the model file names an unknown function {value[tag]!r}; "
                                 "refused"[:300])
        for key, item in value.items():
            if key == "$dict":
                for i, pair in enumerate(self.list(item, f"{where}.$dict")):
                    self.value(pair, f"{where}[{i}]", tags, classes)
            elif key == "state":
                self.value(list(self.dict(item, f"{where}.state").values()), f"{where}.state",
                           tags, classes)
            elif key in ("$tuple", "$slice", "$strings", "args", "keywords"):
                self.value(item, f"{where}.{key}", tags, classes)
