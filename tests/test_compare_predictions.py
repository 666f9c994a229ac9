"""scripts/compare_predictions.py and scripts/trace_fit.py keep working: the child part of the
bitwise comparison on two configurations of this tree, and the static count of switches."""

import importlib.util
from pathlib import Path

import numpy as np

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_matrix_covers_both_estimators_and_every_choice():
    compare = _load("compare_predictions")
    configs = compare.CONFIGS.values()
    assert len(compare.CONFIGS) >= 20
    assert {kind for kind, _, _ in configs} == {"classifier", "regressor"}
    params = [p for _, _, p in configs]
    assert {p.get("hessian_structure") for p in params} >= {"full", "diag", "kron", "lowrank"}
    assert {p.get("subset_of_weights") for p in params} >= {"all", "last_layer", "subnetwork"}
    assert {p.get("hyperparameter_tuning", "auto") for p in params} >= {
        "auto", "evidence", "online", "cv", None}
    assert any("hidden_layer_sizes" not in p for p in params)  # "auto"
    assert any(p.get("noise") == "heteroscedastic" for p in params)
    assert any(p.get("model_averaging") for p in params)
    assert any(task == "multilabel" for _, task, _ in configs)


def test_two_runs_of_the_child_predict_the_same_bits(tmp_path):
    compare = _load("compare_predictions")
    names = ["clf-last-layer-kron-none", "reg-all-diag-online"]
    compare.run_child(tmp_path / "a", names)
    compare.run_child(tmp_path / "b", names)
    assert not list(tmp_path.glob("*/*/error.txt"))
    saved = {p.stem for p in (tmp_path / "a" / names[1]).glob("*.npy")}
    assert {"predict", "mean", "std", "log_evidence_", "prior_precision_",
            "sigma_noise_"} <= saved
    assert "predict_proba" in {p.stem for p in (tmp_path / "a" / names[0]).glob("*.npy")}
    rows = compare.compare(tmp_path / "a", tmp_path / "b", names)
    assert rows and all(status == "equal" for _, _, status, _ in rows)
    # a changed output is reported with its difference
    std = tmp_path / "b" / names[1] / "std.npy"
    np.save(std, np.load(std) + 1e-12)
    rows = compare.compare(tmp_path / "a", tmp_path / "b", names)
    assert [(n, k) for n, k, status, _ in rows if status != "equal"] == [(names[1], "std")]
    assert "differ" in compare.summary(rows, names)


def test_the_package_reads_no_module_level_switch():
    trace = _load("trace_fit")
    assert trace.switches() == []
