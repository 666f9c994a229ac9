"""``python -m benchmarks decisions --quick``: Bayesian optimisation and active learning."""

import json

import numpy as np
import pytest

pytest.importorskip("skopt")
pytest.importorskip("skactiveml")

from benchmarks.__main__ import main  # noqa: E402
from benchmarks.decisions import area, regret_curves  # noqa: E402


def test_quick_run_records_both_sections_and_reports_them(tmp_path, capsys):
    path = tmp_path / "decisions.json"
    records = main(["decisions", "--quick", "--json", str(path), "--out",
                    str(tmp_path / "decisions.md")])
    printed = capsys.readouterr().out
    bo = [r for r in records if r["section"] == "bo"]
    al = [r for r in records if r["section"] == "al"]
    assert {r["method"] for r in bo} == {"LA", "random", "MLPx5"}
    assert all(len(r["values"]) == len(r["seconds"]) == 6 for r in bo)
    curves = regret_curves(records, "branin")
    for curve in curves.values():  # best so far minus the minimum: never negative, never up
        assert np.all(curve >= -1e-6) and np.all(np.diff(curve, axis=1) <= 0)
    assert {r["method"] for r in al} == {"LA-entropy", "LA-BatchBALD", "MLPx5-BALD"}
    for r in al:
        assert r["labels"] == [10, 20] and len(r["seconds"]) == 1
        assert 0.5 < r["accuracy"][-1] <= 1 and r["nll"][-1] > 0
    assert "| branin (1 seeds) |" in printed and "| breast_cancer (10→20 labels" in printed
    report = (tmp_path / "decisions.md").read_text()
    assert printed.endswith(report + "\n")

    # the saved records give the same report without running anything
    assert len(json.loads(path.read_text())["records"]) == len(records)
    main(["decisions", "--load", str(path)])
    assert capsys.readouterr().out == report + "\n"


def test_area_is_the_mean_of_the_curve_over_the_labels():
    assert area([10, 20, 40], [0.5, 0.7, 0.7]) == pytest.approx((6 + 14) / 30)
