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
``optimizer``, ``iterator_train``…) are stored by name and resolved only from the
classes listed for their role, or from ``modules``; callbacks only of the listed
classes. Nothing that reads or writes a path is restored (checkpoints, loggers,
``memory``).
"""

import io as _io
import json
import warnings
import zipfile
from pathlib import Path

import numpy as np
import torch

from . import __version__
from ._laplace.workflow import MODULE_IN_USE
from ._persist import Refused
from ._persist_allowed import check_document
from ._persist_params import _estimators, _ParamReader, _ParamWriter

__all__ = ["save", "load"]

#: Version of the file format; :func:`load` refuses files of a later version.
FORMAT_VERSION = 1

_DOCUMENT = "sklaplace.json"
_FORMAT = "sklaplace-model"


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
    try:
        check_document(doc)
    except Refused as error:
        raise TypeError(f"sklaplace.io cannot save this {type(estimator).__name__}, as "
                        f"sklaplace.io.load would refuse the file: {error}") from None
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
    return Refused(f"{path} is not a model file sklaplace.io can load: {why}. Nothing in "
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
        If the file holds a pickle stream, an object array, an unknown type or class, or
        a callback or parameter that reads or writes a path, was saved in a later format
        version, or needs a module factory not in ``modules``. The message names the file
        and what is wrong.

    See Also
    --------
    save : Write the file.
    """
    if modules is not None and (not isinstance(modules, dict)
                                or not all(callable(v) for v in modules.values())):
        raise TypeError("modules must be a dict of names to module factories (callables)")
    doc, arrays = _read_archive(path)
    _check_version(path, doc)
    try:
        missing = sorted(check_document(doc) - set(modules or {}))
    except Refused as error:
        raise _refuse(path, error) from None
    if missing:
        raise ValueError(
            f"{path} needs the module {missing[0]!r}, a class of your own: pass its factory, "
            f"load(path, modules={{{missing[0]!r}: MyModule}}). The file holds its weights "
            "only; sklaplace.io never builds code from the file.")
    cls = _estimators()[doc["estimator"]]
    reader = _ParamReader(arrays, doc, modules, device)
    try:
        estimator = reader._estimator(cls, doc)
    except Refused as error:
        raise _refuse(path, error) from None
    except torch.cuda.OutOfMemoryError:
        raise
    except (KeyError, IndexError, AttributeError, TypeError, ValueError, RuntimeError,
            OverflowError, RecursionError) as error:  # a document that is not the writer's
        raise _refuse(path, f"its document is malformed ({error!r})"[:400]) from None
    if reader.mapped:
        warnings.warn(
            f"This {cls.__name__} was saved on {reader.mapped[0]!r}, but torch has no CUDA "
            "device here: its tensors were loaded onto the CPU (predictions are the same "
            "numbers). Pass device='cpu' to load to say so.", UserWarning)
    return estimator

