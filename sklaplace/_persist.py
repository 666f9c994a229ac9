"""The typed state of a fitted estimator for :mod:`sklaplace.io`: values ↔ JSON + arrays.

:class:`Writer` turns a value into JSON whose arrays (numpy arrays, torch tensors) are
set aside by key, to be written as ``.npy`` files; :class:`Reader` turns it back. Only
the types below are written or read:

- JSON scalars and lists; tuples, dicts, slices, devices and dtypes as tagged objects;
- arrays of numeric or boolean dtype (tensors keep their device, mapped on reading);
- the classes of the fitted Laplace approximation in the schema's :data:`TYPES`
  (:mod:`sklaplace._persist_schema`), each by the name of its type and its fields in the
  file, never the code's (its *state*); an attribute the schema does not declare refuses
  the save, so that no state is dropped in silence. Caches (``caches``) are not written:
  the class computes them again when it needs them;
- networks (``nn.Module``) by reference to the modules of the file (:mod:`sklaplace.io`
  writes their weights and rebuilds them from their specification, never from the file);
- ``functools.partial`` of the functions in the schema's :data:`FUNCTIONS`.

Anything else is refused naming it: with a ``TypeError`` when writing, with
:class:`Refused` when reading: nothing is unpickled, no class or function is looked up
by a name the file chooses beyond these tables. The same object reached twice is written
once and read back as one object (a posterior shared by the fit and its evidence).
Reading allocates at most :data:`BUDGET` times the bytes of the file's arrays.
"""

import functools
import json
import math

import numpy as np
import torch
from torch import nn

from ._persist_schema import FUNCTIONS, TYPES, Refused

__all__ = ["BUDGET", "FUNCTIONS", "Reader", "Refused", "TYPES", "Writer"]

#: How many times the bytes of its arrays reading a file may allocate: the copies a
#: saved estimator's document asks for (an array read twice, the nets built) come to
#: 1.0–1.3 times (measured over the subsets, structures, tunings and nets of tests/).
BUDGET = 4

_ARRAY_KINDS = "biuf"  # numeric and boolean dtypes: nothing .npy would pickle


def _check_dtype(dtype, what):
    if np.dtype(dtype).kind not in _ARRAY_KINDS:
        raise TypeError(f"sklaplace.io stores numeric arrays only; {what} has dtype {dtype}")


class Writer:
    """Values → JSON; arrays go to ``self.arrays`` (key → numpy array).

    ``module_ref(module)`` returns the JSON reference of a network (``sklaplace.io``
    keeps the table of the file's networks)."""

    def __init__(self, module_ref):
        self.arrays, self._memo, self._module_ref = {}, {}, module_ref
        self._names = {spec.cls: name for name, spec in TYPES.items()}
        self._functions = {func: name for name, func in FUNCTIONS.items()}

    def array(self, value):
        """The key of an array (a tensor: its CPU copy), written once per object."""
        key = self._memo.get(("array", id(value)))
        if key is None:
            if isinstance(value, torch.Tensor):
                if value.dtype == torch.bfloat16:
                    raise TypeError("sklaplace.io cannot store bfloat16 tensors")
                data = value.detach().cpu().numpy()
            else:
                data = value
            _check_dtype(data.dtype, "an array")
            key = self._memo[("array", id(value))] = f"a{len(self.arrays)}"
            self.arrays[key] = data if data.flags.c_contiguous else data.copy(order="C")
            self._keep(value)
        return key

    def _tensor(self, value):
        """A tensor as its array and layout: the stride-0 (expanded) dimensions and the
        order of the others (eigh's column-major factors), so that the loaded tensor
        has the same strides, and products with it the same summation order."""
        memo = self._memo.get(("tensor", id(value)))
        if memo is not None:
            return memo
        t = value.detach()
        out = {"$tensor": None, "device": str(value.device),
               "requires_grad": bool(value.requires_grad)}
        if t.numel() > 1 and 0 in t.stride():
            out["expand"] = list(t.shape)
            t = t[tuple(slice(0, 1) if st == 0 else slice(None) for st in t.stride())]
        order = sorted(range(t.dim()), key=lambda d: -t.stride()[d])
        if order != list(range(t.dim())) and t.permute(order).is_contiguous():
            out["order"], t = order, t.permute(order)
        out["$tensor"] = self.array(t)
        self._memo[("tensor", id(value))] = out
        self._keep(value)
        return out

    def _keep(self, value):  # ids stay unique while the writer lives
        self._memo.setdefault("_alive", []).append(value)

    def __call__(self, value):
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, (int, float)) and type(value) in (int, float):
            return value
        if isinstance(value, np.generic):
            _check_dtype(value.dtype, "a number")
            return {"$scalar": self.array(np.asarray(value))}
        if isinstance(value, np.ndarray):
            return {"$ndarray": self.array(value)}
        if isinstance(value, torch.Tensor):
            return self._tensor(value)
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, tuple) and type(value) is tuple:
            return {"$tuple": [self(v) for v in value]}
        if isinstance(value, dict) and type(value) is dict:
            return {"$dict": [[self(k), self(v)] for k, v in value.items()]}
        if isinstance(value, slice):
            return {"$slice": [self(value.start), self(value.stop), self(value.step)]}
        if isinstance(value, torch.device):
            return {"$device": str(value)}
        if isinstance(value, torch.dtype):
            return {"$dtype": str(value).removeprefix("torch.")}
        if isinstance(value, nn.Module):
            return {"$module": self._module_ref(value)}
        if isinstance(value, functools.partial) and value.func in self._functions:
            return {"$partial": self._functions[value.func], "args": self(value.args),
                    "keywords": self(dict(value.keywords))}
        spec_name = self._names.get(type(value))
        if spec_name is None:
            raise TypeError(
                f"sklaplace.io cannot save a value of type {type(value).__module__}."
                f"{type(value).__qualname__}: it is not part of the saved state's types "
                "(sklaplace._persist_schema.TYPES). No partial file is written; pickle the "
                "estimator (joblib) instead.")
        ref = self._memo.get(("object", id(value)))
        if ref is not None:
            return {"$ref": ref}
        ref = self._memo[("object", id(value))] = len(self._memo)
        self._keep(value)
        state = TYPES[spec_name].state(value)
        return {"$object": spec_name, "id": ref, "state": {k: self(v) for k, v in state.items()}}


class Reader:
    """JSON (and the file's arrays) → values; ``device``: where tensors go (None: where
    they were saved, or the CPU where torch has no such device); ``module(ref)``: the
    rebuilt network of a reference."""

    def __init__(self, arrays, module, device=None):
        self._arrays, self._module, self._device = arrays, module, device
        self._objects, self._tensors = {}, {}
        self.mapped = []
        self._budget = BUDGET * sum(a.nbytes for a in arrays.values()) + 2**20

    def spend(self, nbytes, what):
        """Count ``nbytes`` that reading allocates; refuse past the budget."""
        self._budget -= nbytes
        if self._budget < 0:
            raise Refused(f"its document asks for more copies of its arrays than a saved "
                          f"estimator does ({what}): loading it would allocate more than "
                          f"{BUDGET} times their bytes")

    def shape(self, spec):
        """The shape of the tensor of a ``$tensor`` value, without building it."""
        shape = self.array(spec["$tensor"]).shape
        order = spec.get("order")
        if order is not None:
            if not isinstance(order, list) or sorted(order) != list(range(len(shape))):
                raise Refused("a tensor of the model file has an invalid layout")
            shape = tuple(shape[order.index(d)] for d in range(len(shape)))
        if "expand" in spec:
            expand = spec["expand"]
            if (not isinstance(expand, list) or len(expand) != len(shape) or any(
                    type(n) is not int or n < 0 or (s != 1 and s != n)
                    for n, s in zip(expand, shape))):
                raise Refused(f"a tensor of the model file has an invalid expanded shape "
                              f"{expand!r}"[:200])
            shape = tuple(expand)
        return tuple(shape)

    def _target(self, saved):
        if self._device is not None:
            return torch.device(self._device)
        saved = torch.device(saved)
        if saved.type == "cuda" and not torch.cuda.is_available():
            self.mapped.append(str(saved))
            return torch.device("cpu")
        return saved

    def array(self, key):
        if key not in self._arrays:
            raise Refused(f"the model file lacks the array {key!r}")
        return self._arrays[key]

    def tensor(self, spec):
        """The tensor of a ``$tensor`` value, with its saved layout, on its device."""
        target = self._target(spec["device"])
        memo = json.dumps(spec, sort_keys=True) + str(target)
        if memo not in self._tensors:
            array = self.array(spec["$tensor"])
            shape = self.shape(spec)  # (an expanded view counts as the memory it spans)
            self.spend(max(array.nbytes, math.prod(shape) * array.itemsize), "a tensor")
            t = torch.from_numpy(array.copy()).to(target)
            order = spec.get("order")
            if order is not None:
                t = t.permute([order.index(d) for d in range(t.dim())])
            if "expand" in spec:
                t = t.expand(spec["expand"])
            self._tensors[memo] = t.requires_grad_(True) if spec.get("requires_grad") else t
        return self._tensors[memo]

    def __call__(self, value):
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, list):
            return [self(v) for v in value]
        if not isinstance(value, dict) or len(value) == 0:
            raise Refused(f"unknown value in the model file: {value!r}"[:200])
        tag = next(iter(value))
        if tag == "$ndarray":
            self.spend(self.array(value["$ndarray"]).nbytes, "an array")
            return self.array(value["$ndarray"]).copy()
        if tag == "$scalar":
            return self.array(value["$scalar"])[()]
        if tag == "$tensor":
            return self.tensor(value)
        if tag == "$tuple":
            return tuple(self(v) for v in value["$tuple"])
        if tag == "$dict":
            return {self(k): self(v) for k, v in value["$dict"]}
        if tag == "$slice":
            return slice(*(self(v) for v in value["$slice"]))
        if tag == "$device":
            return self._target(value["$device"])
        if tag == "$dtype":
            dtype = getattr(torch, str(value["$dtype"]), None)
            if not isinstance(dtype, torch.dtype):
                raise Refused(f"unknown dtype in the model file: {value['$dtype']!r}")
            return dtype
        if tag == "$module":
            return self._module(value["$module"])
        if tag == "$partial":
            func = FUNCTIONS.get(value["$partial"])
            if func is None:
                raise Refused(f"the model file names an unknown function "
                              f"{value['$partial']!r}; refused")
            return functools.partial(func, *self(value["args"]), **self(value["keywords"]))
        if tag == "$ref":
            if value["$ref"] not in self._objects:
                raise Refused("the model file refers to an object it does not hold")
            return self._objects[value["$ref"]]
        if tag == "$object":
            spec = TYPES.get(value["$object"])
            if spec is None:
                raise Refused(f"the model file holds an unknown type {value['$object']!r}; "
                              "refused (sklaplace.io reads only the types it writes)")
            obj = spec.build({k: self(v) for k, v in value["state"].items()})
            self._objects[value["id"]] = obj
            return obj
        raise Refused(f"unknown tag {tag!r} in the model file; refused")
