"""sklaplace.io and files from strangers: nothing that reaches the disk is restored, and a
damaged or inconsistent file is a ValueError naming it, raised before any large
allocation."""

import functools
import io
import json
import re
import warnings
import zipfile
from pathlib import Path

import joblib
import numpy as np
import pytest
from sklearn.datasets import make_classification
from skorch import NeuralNetClassifier
from skorch.callbacks import GradientNormClipping, LRScheduler
from torch import nn

from sklaplace import LaplaceClassifier, LaplaceRegressor
from sklaplace import io as skio
import test_io
from test_io import TinyNet  # the user module of the round-trip tests, saved by its name

X, y = make_classification(48, 4, n_informative=3, n_redundant=0, n_classes=3, random_state=0)
SMALL = dict(hidden_layer_sizes=(6,), max_epochs=8, random_state=0)


def _fit(est):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X.astype(np.float32), y)


DATA = Path(__file__).parent / "data"


def _version_1(name, tmp_path_factory):
    """A copy of a file that the version-1 writer wrote (tests/data)."""
    path = tmp_path_factory.mktemp("v1") / f"{name}.sklaplace"
    path.write_bytes((DATA / f"{name}.skl").read_bytes())
    return path


# Every check holds for both format versions: each file is of the version the writer
# writes now (2) and of version 1, which its reader translates before checking.
@pytest.fixture(scope="module", params=[2, 1], ids=["v2", "v1"])
def default_file(request, tmp_path_factory):
    if request.param == 1:
        return _version_1("v1_classifier_full_layerwise", tmp_path_factory)
    est = _fit(LaplaceClassifier(**SMALL, subset_of_weights="last_layer",
                                 hessian_structure="full"))
    return skio.save(est, tmp_path_factory.mktemp("good") / "default.sklaplace")


@pytest.fixture(scope="module", params=[2, 1], ids=["v2", "v1"])
def callbacks_file(request, tmp_path_factory):
    """A fitted net of the user's with callbacks: the document a hostile one edits (the
    version-1 file: the same net, fit and callbacks)."""
    if request.param == 1:
        return _version_1("v1_user_net_callbacks", tmp_path_factory)
    net = NeuralNetClassifier(TinyNet, max_epochs=3, criterion=nn.CrossEntropyLoss,
                              train_split=None, verbose=0,
                              callbacks=[GradientNormClipping(1.0),
                                         ("sched", LRScheduler("StepLR", step_size=2))],
                              callbacks__sched__step_size=3,
                              callbacks__print_log__floatfmt=".3f")
    est = _fit(LaplaceClassifier(net, random_state=0, subset_of_weights="last_layer"))
    return skio.save(est, tmp_path_factory.mktemp("good") / "callbacks.sklaplace")


# the round-trip tests' rewriters, writing compressed members as save does
_rewrite = functools.partial(test_io._rewrite, compress=zipfile.ZIP_DEFLATED)
_edit = functools.partial(test_io._edit_document, compress=zipfile.ZIP_DEFLATED)


def _refused(path, *words):
    """pytest.raises for a ValueError that names the file and each of ``words``."""
    pattern = re.escape(str(path)) + "".join(f".*{re.escape(w)}" for w in words)
    return pytest.raises(ValueError, match=re.compile(pattern, re.S))


# ---------------------------------------------------------------- the disk
def test_memory_is_never_written_and_never_restored(default_file, tmp_path):
    for memory in [str(tmp_path / "cache_str"), joblib.Memory(tmp_path / "cache_obj",
                                                               verbose=0)]:
        path = skio.save(LaplaceRegressor(memory=memory), tmp_path / "m.sklaplace")
        doc = json.loads(zipfile.ZipFile(path).read("sklaplace.json"))
        assert doc["params"]["memory"] is None
        assert skio.load(path).memory is None
    for i, value in enumerate([str(tmp_path / "planted"), {"$memory": str(tmp_path / "planted")}]):
        def plant(doc):
            doc["params"]["memory"] = value

        path = _edit(default_file, tmp_path / f"memory{i}.sklaplace", plant)
        with _refused(path, "params.memory", "cache directory"):
            skio.load(path)
    assert not (tmp_path / "cache_str").exists() and not (tmp_path / "planted").exists()


def _instance(name, **params):
    return {"$instance": name, "params": params}


def _hostile_nets(notes):
    """{case: (edit of the net's parameters, the entry the refusal names, a word of its
    reason)}; ``notes``: the directory of the user's file a checkpoint would overwrite."""
    checkpoint = _instance("skorch.callbacks.training:Checkpoint", dirname=notes,
                           f_params="notes.txt", f_optimizer=None, f_criterion=None,
                           f_history=None, monitor=None)

    def callback(value):
        return lambda p: p["callbacks"].append(value)

    def setting(key, value):
        return lambda p: p.__setitem__(key, value)

    loggers = ["skorch.callbacks.logging:TensorBoard", "skorch.callbacks.logging:MlflowLogger",
               "skorch.callbacks.logging:WandbLogger", "skorch.callbacks.logging:NeptuneLogger",
               "skorch.callbacks.logging:SacredLogger"]
    return {
        "checkpoint": (callback(checkpoint), "callbacks[2]", "Checkpoint"),
        "named_checkpoint": (callback({"$tuple": ["cp", checkpoint]}), "callbacks[2]",
                             "Checkpoint"),
        "checkpoint_class": (callback({"$class": "skorch.callbacks.training:Checkpoint"}),
                             "callbacks[2]", "Checkpoint"),
        "train_end_checkpoint": (
            callback(_instance("skorch.callbacks.training:TrainEndCheckpoint", dirname=notes)),
            "callbacks[2]", "TrainEndCheckpoint"),
        "load_init_state": (
            callback(_instance("skorch.callbacks.training:LoadInitState", checkpoint=checkpoint)),
            "callbacks[2]", "LoadInitState"),
        **{name.split(":")[1]: (callback(_instance(name, writer=notes)), "callbacks[2]",
                                name.split(":")[1]) for name in loggers},
        "replaced_default": (setting("callbacks__print_log", checkpoint),
                             "callbacks__print_log", "Checkpoint"),
        "callback_param": (setting("callbacks__sched__dirname", notes),
                           "callbacks__sched__dirname", "dirname"),
        "unknown_callback": (setting("callbacks__checkpoint__dirname", notes),
                             "callbacks__checkpoint__dirname", "sets no callback"),
        "class_in_a_role": (setting("iterator_train",
                                    {"$class": "skorch.callbacks.training:Checkpoint"}),
                            "iterator_train", "Checkpoint"),
        "class_as_an_argument": (setting("optimizer__foreach",
                                         {"$class": "skorch.callbacks.training:Checkpoint"}),
                                 "optimizer__foreach", "a class"),
        "compile": (setting("compile", True), "compile", "torch.compile"),
        "compile_options": (setting("compile__options", {"$dict": [["cpp.cxx", "/bin/sh"]]}),
                            "compile__options", "not a parameter"),
        "torch_load_kwargs": (setting("torch_load_kwargs", {"$dict": [["weights_only", False]]}),
                              "torch_load_kwargs", "how torch loads"),
    }


@pytest.mark.parametrize("case", list(_hostile_nets("")))
def test_nothing_that_reads_or_writes_a_path_is_restored(callbacks_file, tmp_path, case):
    notes = tmp_path / "notes.txt"
    notes.write_text("the user's notes")
    edit, entry, word = _hostile_nets(str(tmp_path))[case]
    path = _edit(callbacks_file, tmp_path / "hostile.sklaplace",
                 lambda doc: edit(doc["attributes"]["net_"]["params"]))
    with _refused(path, f"attributes.net_.params.{entry}", word):
        skio.load(path, modules={"TinyNet": TinyNet})
    assert notes.read_text() == "the user's notes" and sorted(tmp_path.iterdir()) == sorted(
        [notes, path])


def test_classes_outside_the_tables_are_refused(callbacks_file, tmp_path):
    def net_class(doc):
        doc["attributes"]["net_"]["$net"] = "skorch.callbacks.training:Checkpoint"

    def scheduler_policy(doc):
        doc["attributes"]["net_"]["params"]["callbacks"][1]["$tuple"][1]["params"][
            "policy"] = {"$class": "skorch.callbacks.training:Checkpoint"}

    def estimator_param(doc):
        doc["params"]["prior_precision"] = _instance("skorch.callbacks.training:Checkpoint")

    def attribute(doc):
        doc["attributes"]["predict"] = 1.0

    for edit, words in [(net_class, ["attributes.net_", "not a net class"]),
                        (scheduler_policy, ["policy", "learning-rate schedule"]),
                        (estimator_param, ["params.prior_precision", "an object"]),
                        (attribute, ["attributes.predict", "not a fitted attribute"])]:
        path = _edit(callbacks_file, tmp_path / "bad.sklaplace", edit)
        with _refused(path, *words):
            skio.load(path, modules={"TinyNet": TinyNet})


def test_allowed_callbacks_round_trip(callbacks_file):
    loaded = skio.load(callbacks_file, modules={"TinyNet": TinyNet})
    clip, (name, scheduler) = loaded.net_.callbacks
    assert type(clip) is GradientNormClipping and clip.gradient_clip_value == 1.0
    assert name == "sched" and type(scheduler) is LRScheduler and scheduler.step_size == 3
    assert loaded.net_.callbacks__sched__step_size == 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded.fit(X.astype(np.float32), y)  # trains with them, as the saved one did
    assert loaded.predict_proba(X).shape == (48, 3)


def test_save_refuses_what_load_would_refuse(tmp_path):
    net = NeuralNetClassifier(TinyNet, compile=True, train_split=None)
    path = tmp_path / "never.sklaplace"
    with pytest.raises(TypeError, match="load would refuse.*torch.compile"):
        skio.save(LaplaceClassifier(net), path)
    assert not path.exists()


# ---------------------------------------------------------------- resources and damage
def _npy(header_shape, data=b"\0" * 16, descr="<f8"):
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        out, {"descr": descr, "fortran_order": False, "shape": header_shape})
    return out.getvalue() + data


def _largest_array(path):
    """The key and the array of a file's largest array."""
    with zipfile.ZipFile(path) as z:
        info = max((i for i in z.infolist() if i.filename.endswith(".npy")),
                   key=lambda i: i.file_size)
        return info.filename[7:-4], np.load(io.BytesIO(z.read(info)))


def test_a_member_the_document_does_not_name_is_never_read(default_file, tmp_path,
                                                           monkeypatch):
    opened, open_member = [], zipfile.ZipFile.open

    def spy(self, name, *args, **kwargs):
        opened.append(getattr(name, "filename", name))
        return open_member(self, name, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", spy)
    big = np.zeros(2**20)  # 8 MB; a 1 GB member is refused the same way
    buffer = io.BytesIO()
    np.save(buffer, big)
    for name in ["arrays/unused.npy", "notes.txt"]:
        path = _rewrite(default_file, tmp_path / "extra.sklaplace",
                        add={name: buffer.getvalue()})
        opened.clear()
        with _refused(path, repr(name), "does not refer to"):
            skio.load(path)
        assert opened == ["sklaplace.json"]


def test_array_headers_are_checked_before_allocation(default_file, tmp_path):
    key, array = _largest_array(default_file)
    member = f"arrays/{key}.npy"
    huge = lambda _: _npy((10**11,))  # noqa: E731  (745 GiB if numpy allocated it)
    path = _rewrite(default_file, tmp_path / "huge.sklaplace", replace={member: huge})
    with _refused(path, member, "the archive lists it as 144 bytes"):  # before it is read
        skio.load(path)

    def undeclared(d):  # a file without the list of arrays: the header against the member
        del d["arrays"]

    path = _rewrite(_edit(default_file, tmp_path / "a.sklaplace", undeclared),
                    tmp_path / "huge_undeclared.sklaplace", replace={member: huge})
    with _refused(path, member, "100000000000 elements", "holds 16 bytes"):
        skio.load(path)
    other = lambda _: _npy(array.shape[::-1] + (1,), array.tobytes())  # noqa: E731
    path = _rewrite(default_file, tmp_path / "other.sklaplace", replace={member: other})
    with _refused(path, member, "where its document declares"):
        skio.load(path)
    pickled = lambda _: _npy((1,), b"\0" * 8, descr="|O")  # noqa: E731
    path = _rewrite(tmp_path / "a.sklaplace", tmp_path / "object.sklaplace",
                    replace={member: pickled})
    with _refused(path, member, "not a plain numeric array"):
        skio.load(path)


def test_a_module_sized_by_the_document_is_refused_before_it_is_built(default_file, tmp_path):
    def wide(doc):  # a 10¹² × 4 first layer: 16 TB if it were built
        doc["attributes"]["net_"]["params"]["module__hidden_layer_sizes"] = {
            "$tuple": [10**12]}

    path = _edit(default_file, tmp_path / "wide.sklaplace", wide)
    with _refused(path, "not the one whose weights it holds", "1000000000000"):
        skio.load(path)


def test_arrays_are_not_copied_more_than_a_saved_estimator_does(default_file, tmp_path):
    key, _ = _largest_array(default_file)

    def copies(d):
        d["attributes"]["many_"] = [{"$ndarray": key}] * 20_000

    path = _edit(default_file, tmp_path / "copies.sklaplace", copies)
    with _refused(path, "more copies of its arrays"):
        skio.load(path)


def test_damaged_archives_are_value_errors(default_file, tmp_path):
    data = default_file.read_bytes()
    # every 29th byte, and each of the last 250 (the end of the zip directory)
    positions = sorted(set(range(0, len(data), 29)) | set(range(len(data) - 250, len(data))))
    path, loaded = tmp_path / "flipped.sklaplace", 0
    for position in positions:
        damaged = bytearray(data)
        damaged[position] ^= 0xFF
        path.write_bytes(bytes(damaged))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                skio.load(path)
            loaded += 1  # (a timestamp, say)
        except ValueError as error:
            assert str(path) in str(error), (position, error)
    assert loaded < len(positions) // 4
    for name, kwargs in [("lzma", dict(compress=zipfile.ZIP_LZMA)),
                         ("twice", dict(add={"sklaplace.json": b"{}"}))]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (zipfile warns of the duplicate name)
            path = _rewrite(default_file, tmp_path / f"{name}.sklaplace", **kwargs)
        with _refused(path):
            skio.load(path)


def test_a_deeply_nested_document_is_refused(default_file, tmp_path):
    for depth in [100, 100_000]:
        def deep(data):
            doc = json.loads(data)
            doc["params"]["prior_precision"] = "DEEP"
            return json.dumps(doc).replace('"DEEP"', "[" * depth + "]" * depth).encode()

        path = _rewrite(default_file, tmp_path / f"deep{depth}.sklaplace",
                        replace={"sklaplace.json": deep})
        with _refused(path, "nests deeper than"):
            skio.load(path)


@pytest.mark.parametrize("version", [True, "1", None, 1.5, [1]])
def test_a_version_that_is_no_integer_is_refused(default_file, tmp_path, version):
    def edit(doc):
        doc["version"] = version

    path = _edit(default_file, tmp_path / "v.sklaplace", edit)
    with _refused(path, "is not a valid format version"):
        skio.load(path)


@pytest.mark.parametrize("version", [skio.FORMAT_VERSION + 1, 10**6])
def test_a_later_version_asks_for_a_newer_sklaplace(default_file, tmp_path, version):
    path = _edit(default_file, tmp_path / "later.sklaplace",
                 lambda doc: doc.__setitem__("version", version))
    with _refused(path, f"format version {version}",
                  f"reads versions up to {skio.FORMAT_VERSION}", "Upgrade sklaplace"):
        skio.load(path)


@pytest.mark.parametrize("version", [0, -1])
def test_a_version_no_sklaplace_wrote_is_refused(default_file, tmp_path, version):
    path = _edit(default_file, tmp_path / "earlier.sklaplace",
                 lambda doc: doc.__setitem__("version", version))
    with _refused(path, f"format version {version}", "which no sklaplace wrote"):
        skio.load(path)


def test_types_classes_and_functions_outside_the_schema_are_refused(default_file, tmp_path):
    """In either version, by the names of that version: what its tables do not list is
    refused, and a version-2 file cannot name sklaplace's classes by their module paths."""
    version = json.loads(zipfile.ZipFile(default_file).read("sklaplace.json"))["version"]

    def unknown_object(doc):
        doc["attributes"]["laplace_"]["$object"] = "os.system"

    def foreign_function(doc):
        doc["attributes"]["laplace_"]["state"]["report"] = {
            "$partial": "builtins.eval", "args": {"$tuple": ["1"]}, "keywords": {"$dict": []}}

    def foreign_class(doc):
        doc["attributes"]["net_"]["params"]["optimizer"] = {"$class": "os:system"}

    def module_path(doc):  # the code's path of the default MLP: version 1's name of it
        doc["attributes"]["net_"]["params"]["module"] = {
            "$class": "sklaplace._laplace.nets:MLP"}

    def unknown_field(doc):
        doc["attributes"]["laplace_"]["state"]["posterior"]["state"]["_hidden"] = 1.0

    cases = [(unknown_object, ["unknown type 'os.system'"]),
             (foreign_function, ["unknown function 'builtins.eval'"]),
             (foreign_class, ["not one sklaplace.io rebuilds as a skorch net's optimizer"]),
             (unknown_field, ["unknown fields ['_hidden']"])]
    if version == 2:
        cases.append((module_path, ["sklaplace._laplace.nets:MLP", "not one sklaplace.io "
                                    "rebuilds as a skorch net's module"]))
    for edit, words in cases:
        path = _edit(default_file, tmp_path / "bad.sklaplace", edit)
        with _refused(path, *words):
            skio.load(path)
    if version == 1:  # version 1's name of the default MLP is its module path
        path = _edit(default_file, tmp_path / "v1.sklaplace", module_path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert skio.load(path).net_.module.__name__ == "MLP"


def test_a_version_1_document_with_a_field_twice_is_refused(tmp_path_factory, tmp_path):
    path = _version_1("v1_classifier_full_layerwise", tmp_path_factory)

    def twice(doc):  # 'V' translates to 'eigenvectors', which it also holds
        state = doc["attributes"]["laplace_"]["state"]["posterior"]["state"]
        state["eigenvectors"] = state["V"]

    path = _edit(path, tmp_path / "twice.sklaplace", twice)
    with _refused(path, "has a field twice"):
        skio.load(path)
