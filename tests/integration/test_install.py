"""The lab installs as a package (`pip install -e .`) beside the set-up's torch and vLLM, runs
`python -m lab --help`, and a plain install's resolution holds no CUDA wheel nor torch
(scripts/check_install.sh, the proof docs/guides/developing.md names)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def test_the_lab_installs_without_a_cuda_wheel_and_its_cli_runs() -> None:
    done = subprocess.run(
        [str(PROJECT_ROOT / "scripts" / "check_install.sh")], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "none of them CUDA or torch" in done.stdout
    assert done.stdout.rstrip().endswith("install: ok")
