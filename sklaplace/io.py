"""Save and load fitted estimators in a file whose loading runs no code.

:func:`save` writes one file, a zip archive of a JSON document (the constructor
parameters, the fitted attributes, the specification of the networks) and ``.npy``
arrays (the weights, the posterior, the evidence…); :func:`load` reads it back without
running code from it and builds only the types sklaplace writes. Nothing is unpickled:
a file holding a pickle stream, an object array or an unknown type is refused with a
``ValueError``. Use it to share models; ``pickle``/``joblib`` remain for ``clone``,
caching and multiprocessing, and must only load files you trust.

Networks are rebuilt from their specification, never from the file: sklaplace's
default MLP from its sizes; a module of your own from the factory you pass to
:func:`load` under the name it was saved with (``module_name``, by default the class's
qualified name). Parameters that are classes (skorch's ``module``, ``criterion``,
``optimizer``, ``iterator_train``…) are stored by name and resolved only from the
classes listed for their role, or from ``modules``; callbacks only of the listed
classes. Nothing that reads or writes a path is restored (checkpoints, loggers,
``memory``).

A file is checked before anything in it is built or any array read: its members
against its document, each array's header against the document and the member's size
in the archive's directory, a net's module against the weights it holds. Whatever is
wrong with a file, :func:`load` raises a ``ValueError`` that names it.

The file names what it stores by a schema of its own (format version 2): each type of
the fitted state and each of its fields for what it is (``posterior/eigen`` and its
``eigenvectors``, say), never by the code's classes, attributes or modules, so that a
change inside sklaplace leaves the format as it is. Files of format version 1, which
used the code's names, still load.
"""

import io as _io
import json
import math
import tokenize
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np
import torch

from . import __version__
from ._laplace.workflow import MODULE_IN_USE
from ._persist import Refused
from ._persist_allowed import check_document
from ._persist_params import _estimators, _ParamReader, _ParamWriter
from ._persist_schema import from_version_1

__all__ = ["save", "load"]

#: Version of the file format that :func:`save` writes: 2, whose types and fields are
#: named by a schema of its own. :func:`load` reads it and version 1, and refuses files
#: of a later version.
FORMAT_VERSION = 2

_DOCUMENT = "sklaplace.json"
_FORMAT = "sklaplace-model"
_MAX_DEPTH = 64  # a saved estimator's document nests about 15 levels
_MAX_HEADER = 10000  # bytes of an .npy header: numpy's own limit
_ARRAY_KINDS = "biufUS"
# what a damaged archive raises while it is read
_DAMAGED = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError,
            ValueError, NotImplementedError, RuntimeError)


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
    doc["arrays"] = {key: {"dtype": a.dtype.str, "shape": list(a.shape)}
                     for key, a in writer.arrays.items()}
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
    """The document and the arrays of the file, each checked before it is read."""
    with open(path, "rb") as file:
        try:
            archive = zipfile.ZipFile(file)
        except _DAMAGED:
            file.seek(0)
            why = ("it is a pickle stream (joblib or pickle), which sklaplace.io never loads"
                   if file.read(1) == b"\x80" else
                   "it is not a zip archive written by sklaplace.io.save")
            raise _refuse(path, why) from None
        with archive:
            return _read_members(path, archive)


def _read_members(path, archive):
    infos = archive.infolist()
    names = [info.filename for info in infos]
    if _DOCUMENT not in names:
        pickled = [n for n in names if n.endswith(".pkl")]
        raise _refuse(path, f"it holds {pickled[0]!r}, a pickle stream (torch.save?)"
                      if pickled else f"it has no {_DOCUMENT}")
    if len(set(names)) != len(names):
        raise _refuse(path, "it holds a member twice")
    for info in infos:
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) or (
                info.flag_bits & 0x1):  # (bzip2, lzma and encryption: never written)
            raise _refuse(path, f"{info.filename} is encrypted or compressed in a way "
                                "sklaplace.io.save never writes")
    try:
        doc = json.loads(archive.read(_DOCUMENT).decode("utf-8"))
    except RecursionError:
        raise _refuse(path, f"its document nests deeper than {_MAX_DEPTH} levels") from None
    except _DAMAGED as error:
        raise _refuse(path, f"its document is damaged or not JSON ({error})") from None
    _check_version(path, doc)  # first: a later format may hold what this one does not
    keys = _referenced(path, doc)
    unknown = sorted(set(names) - {_DOCUMENT} - {f"arrays/{k}.npy" for k in keys})
    if unknown:  # never read: a member the document does not name is no part of the model
        raise _refuse(path, f"it holds {unknown[0]!r}, which its document does not refer to")
    missing = sorted(k for k in keys if f"arrays/{k}.npy" not in names)
    if missing:
        raise _refuse(path, f"its document refers to the array {missing[0]!r}, which it does "
                            "not hold")
    declared = doc.get("arrays")
    if declared is not None and (not isinstance(declared, dict) or set(declared) != keys):
        raise _refuse(path, "its list of arrays is not the arrays its document refers to")
    return doc, {k: _read_array(path, archive, archive.getinfo(f"arrays/{k}.npy"),
                                None if declared is None else declared[k])
                 for k in sorted(keys)}


def _referenced(path, doc):
    """The keys of the arrays the document refers to; refuses one nested too deeply."""
    keys, stack = set(), [(doc, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise _refuse(path, f"its document nests deeper than {_MAX_DEPTH} levels")
        if isinstance(value, dict):
            for tag in ("$ndarray", "$scalar", "$tensor"):
                if tag in value:
                    if not isinstance(value[tag], str):
                        raise _refuse(path, f"its document names an array by "
                                            f"{value[tag]!r}"[:200])
                    keys.add(value[tag])
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return keys


def _read_array(path, archive, info, declared):
    """One ``.npy`` member, its size checked in the zip directory and its header against
    the document's declaration before its data are read."""
    name = info.filename
    if declared is not None:
        try:
            dtype, shape = np.dtype(declared["dtype"]), tuple(declared["shape"])
            nbytes = math.prod(shape) * dtype.itemsize
        except (KeyError, TypeError, ValueError):
            raise _refuse(path, f"its document declares {name} as {declared!r}"[:300]) from None
        if not nbytes < info.file_size <= nbytes + _MAX_HEADER + 16:
            raise _refuse(path, f"{name} is declared as {math.prod(shape)} elements of {dtype} "
                                f"({nbytes} bytes), but the archive lists it as "
                                f"{info.file_size} bytes")
    try:
        with archive.open(info) as member:
            version = np.lib.format.read_magic(member)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f"format version {version}")
            header = (np.lib.format.read_array_header_1_0 if version == (1, 0) else
                      np.lib.format.read_array_header_2_0)
            shape, _, dtype = header(member, max_header_size=_MAX_HEADER)
            offset = member.tell()
    # (TokenError: a damaged header that numpy's reader of older headers tokenizes)
    except (*_DAMAGED, SyntaxError, TypeError, tokenize.TokenError) as error:
        raise _refuse(path, f"{name} is damaged or not an .npy array ({error})") from None
    if (dtype.hasobject or dtype.kind not in _ARRAY_KINDS or dtype.fields is not None
            or dtype.subdtype is not None):
        raise _refuse(path, f"{name} is not a plain numeric array: it has dtype {dtype}")
    if not all(type(n) is int and n >= 0 for n in shape):
        raise _refuse(path, f"{name} has the shape {shape!r}"[:200])
    if declared is not None and (dtype.str, list(shape)) != (declared["dtype"],
                                                              list(declared["shape"])):
        raise _refuse(path, f"{name} holds a {dtype} array of shape {shape}, where its document "
                            f"declares {declared['dtype']} of shape {tuple(declared['shape'])}")
    nbytes = math.prod(shape) * dtype.itemsize
    if offset + nbytes != info.file_size:  # before anything of that size is allocated
        raise _refuse(path, f"the header of {name} declares {math.prod(shape)} elements of "
                            f"{dtype} ({nbytes} bytes), but the member holds "
                            f"{info.file_size - offset} bytes of data")
    try:
        with archive.open(info) as member:
            return np.lib.format.read_array(member, allow_pickle=False,
                                            max_header_size=_MAX_HEADER)
    except _DAMAGED as error:
        raise _refuse(path, f"{name} is damaged ({error})") from None


def _check_version(path, doc):
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
        raise _refuse(path, "its document is not a sklaplace model")
    version = doc.get("version")
    if type(version) is not int:  # (not a bool, which is an int)
        raise _refuse(path, f"{json.dumps(version)[:50]} is not a valid format version (an "
                            "integer)")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{path} was saved by sklaplace {str(doc.get('sklaplace'))[:20]} in format version "
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
        If the file holds a pickle stream, an object array, an unknown type or class, a
        callback or parameter that reads or writes a path, is damaged, inconsistent
        (members, array headers or networks that its document does not describe) or
        nested too deeply, was saved in a later format version, or needs a module
        factory not in ``modules``. The message names the file and what is wrong.

    See Also
    --------
    save : Write the file.
    """
    if modules is not None and (not isinstance(modules, dict)
                                or not all(callable(v) for v in modules.values())):
        raise TypeError("modules must be a dict of names to module factories (callables)")
    doc, arrays = _read_archive(path)
    try:
        if doc["version"] == 1:  # the code's names of the time, translated to the schema's
            from_version_1(doc)
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

