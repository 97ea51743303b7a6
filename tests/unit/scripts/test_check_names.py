"""scripts/check_names.py: the tree's names resolve, and a wrong module, file, class or function
name, a path outside the repository and a machine's absolute path are each found."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("check_names", PROJECT_ROOT / "scripts" / "check_names.py")
assert _spec is not None and _spec.loader is not None
check_names = importlib.util.module_from_spec(_spec)
sys.modules["check_names"] = check_names  # its dataclasses look their module up
_spec.loader.exec_module(check_names)


def test_the_tree_s_names_resolve() -> None:
    assert [str(finding) for finding in check_names.check()] == []


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "lab" / "run").mkdir(parents=True)
    (tmp_path / "lab" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "lab" / "run" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "lab" / "run" / "steps.py").write_text(
        "class RunSteps:\n    def collect(self): ...\n", encoding="utf-8"
    )
    (tmp_path / "docs").mkdir()
    return tmp_path


def test_wrong_names_in_docstrings_comments_and_documents_are_found(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "lab" / "run" / "runner.py").write_text(
        '"""The steps are ``run_steps.RunSteps``\'s (``steps.RunSteps`` is right); see lab/run/steps.py.\n\n'
        'Its tests: tests/unit/test_runner.py. The class: lab.run.steps.RunSteps; lab.run.steps.Missing is not."""\n'
        "# the seed's tables (../shared/reference/seed-experiments.md); a venv at /work/peer-venv\n"
        "import json  # ``json.loads`` and ``httpx.AsyncClient`` are libraries, ``load.vus`` a setting\n",
        encoding="utf-8",
    )
    (root / "README.md").write_text(
        "See [the steps](lab/run/steps.py), [a gone page](docs/gone.md) and `lab/statistics.py`.\n"
        "Output goes to `data/runs/` and `site/`; run `python -m benchmarks.NAME`.\n"
        '# A section\n\nAs measured (README.md, "A section"); not README.md, "Machine speed".\n',
        encoding="utf-8",
    )
    found = sorted(f"{finding.path}:{finding.line}: {finding.text}" for finding in check_names.check(root))
    assert found == [
        "README.md:1: docs/gone.md does not exist",
        "README.md:1: lab/statistics.py does not exist",
        'README.md:5: README.md has no section "Machine speed"',
        "lab/run/runner.py:1: run_steps.RunSteps: no module run_steps.py",
        "lab/run/runner.py:3: lab.run.steps.Missing: lab.run.steps has no Missing",
        "lab/run/runner.py:3: tests/unit/test_runner.py does not exist",
        "lab/run/runner.py:4: ../shared/reference/seed-experiments.md points outside the repository",
        "lab/run/runner.py:4: /work/peer-venv: an absolute path of a machine",
    ]
