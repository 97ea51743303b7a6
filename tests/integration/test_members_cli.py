"""Lab members from the CLI (real processes): ``lab run --json`` records the operating-system
user, ``lab runs export`` carries ``launched_by``, and ``lab start`` refuses a settings file
with an unknown role in one line."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.integration


def lab(
    data_dir: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("LAB_")}
    environment.update({"LAB_DATA_DIR": str(data_dir), **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "lab", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
    )


def test_lab_run_records_the_os_user_and_the_export_carries_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    # An external target on a closed port: the run fails at once, and is recorded all the same.
    result = lab(
        data_dir,
        "run",
        "--preset",
        "seed-exp1",
        "--quick",
        "--json",
        "--set",
        "backend=external",
        "--set",
        "target_url=http://127.0.0.1:9",
        "--set",
        "model=stub",
        "--set",
        "grid.load.vus=[1]",
        "--set",
        "load.duration_s=2",
        env={"LOGNAME": "carol-cli", "USER": "carol-cli"},
    )
    assert result.returncode in (0, 1), result.stderr[-2000:]
    records = json.loads(result.stdout)
    assert [record["launched_by"] for record in records] == ["carol-cli"]
    export = lab(data_dir, "runs", "export", "--csv", str(tmp_path / "runs.csv"))
    assert export.returncode == 0, export.stderr
    rows = list(csv.DictReader(io.StringIO((tmp_path / "runs.csv").read_text())))
    assert [row["launched_by"] for row in rows] == ["carol-cli"]


def test_lab_start_refuses_an_unknown_role_in_one_line(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.toml"
    secrets.write_text('[roles]\nadmin = ["ada@lab.example"]\nsuperuser = ["eve@lab.example"]\n')
    result = lab(tmp_path / "data", "start", "--port", "9", env={"STREAMLIT_SECRETS_FILES": str(secrets)}, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert result.stderr.startswith("error: unknown role 'superuser' in [roles]")
