"""``python -m benchmarks all``: the one command of the benchmarks page."""

import pathlib
import re

from benchmarks.__main__ import main

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def test_dry_run_prints_each_step_and_the_page_lists_the_same_commands(capsys):
    main(["all", "--dry-run"])
    printed = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[3] for line in printed] == ["defaults", "uci", "speed"]
    page = DOCS.read_text()
    assert "python -m benchmarks all\n" in page
    listed = re.findall(r"^python -m benchmarks (?:defaults|uci|speed) .*$", page, re.M)
    assert printed == listed[:3]


def test_steps_and_out_dir_select_and_redirect(capsys):
    main(["all", "--dry-run", "--steps", "speed", "--out-dir", "elsewhere"])
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("python -m benchmarks speed ") and "--out elsewhere/speed.md" in line
