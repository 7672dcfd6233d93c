"""utils/cli/hosts.py::_import_report: what the run's end needs (the history's SQLAlchemy and dialect, the
report's modules and compiled template) is made while the hosts prepare, so that recording the history and
writing report.html after the last case import nothing more. Each check runs in a fresh interpreter, which
imports run.py as ``python3 run.py`` does, so the modules loaded are those of a real run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.history_runs import INFERENCE, write_case_run

# Module families the run's end loads lazily: after the warm-up none of them may be new.
RUN_END_FAMILIES = ("sqlalchemy", "sqlite3", "_sqlite3", "jinja2", "markupsafe", "utils.history", "utils.results")

PROBE = """
import json, sys
from pathlib import Path
import run  # noqa: F401 - run.py's own imports, as a run has them
from utils.cli.hosts import _import_report
from utils.cli.summary import write_report_safely
from utils.history.ingest import record_runs

run_dir, url = Path(sys.argv[1]), sys.argv[2]
_import_report(None if url == "off" else url)
store_made = Path(sys.argv[3]).exists()
before = set(sys.modules)
line = record_runs([run_dir], None if url == "off" else url)
report = write_report_safely(run_dir, Path(".").resolve())
print(json.dumps({"new": sorted(set(sys.modules) - before), "before": sorted(before), "line": line,
                  "report": str(report), "store_made_by_warm_up": store_made}))
"""


def probe(tmp_path: Path, history: str) -> dict:
    run_dir = write_case_run(tmp_path, "run1", qps=100.0)
    store = tmp_path / "history.sqlite"
    url = "off" if history == "off" else f"sqlite:///{store}"
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(run_dir), url, str(store)],
        cwd=INFERENCE,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def of_run_end(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] in RUN_END_FAMILIES or m.startswith(RUN_END_FAMILIES)]


def test_after_the_warm_up_the_history_and_the_report_import_nothing_more(tmp_path):
    found = probe(tmp_path, "sqlite")
    assert found["line"].startswith("history: 8 figure(s) of 1 run(s) added to sqlite:///")
    assert found["report"].endswith("report.html")
    assert of_run_end(found["new"]) == []
    assert "sqlalchemy.dialects.sqlite.pysqlite" in found["before"] and "jinja2" in found["before"]
    assert found["store_made_by_warm_up"] is False  # the warm-up connects to nothing


def test_with_the_history_off_sqlalchemy_is_never_imported(tmp_path):
    found = probe(tmp_path, "off")
    assert found["line"] == "history: off (HISTORY: off in host.yaml)"
    assert not [m for m in found["before"] + found["new"] if m.split(".")[0] == "sqlalchemy"]
    assert of_run_end(found["new"]) == []  # the report's part is warm all the same


@pytest.mark.parametrize("url", ["mysql://db.example/x", "sqlite:///"])
def test_a_url_the_warm_up_cannot_use_is_left_to_the_run_s_end_to_say(capsys, url):
    # host.yaml's check refuses these before a run; a warm-up thread that meets one anyway prints no
    # traceback into the run's console: the run's end says it, in one line
    from utils.cli.hosts import _import_report

    assert _import_report(url) is None
    assert capsys.readouterr() == ("", "")
