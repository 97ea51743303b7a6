"""Provenance: a run records the lab's commit, whether the tree was dirty, and a hash of the diff."""

import subprocess
from pathlib import Path

import pytest

from lab.measurement import environment

pytestmark = pytest.mark.integration  # runs git in a scratch checkout


@pytest.fixture()
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    def git(*argv: str) -> None:
        subprocess.run(["git", *argv], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "lab@example.org")
    git("config", "user.name", "lab")
    (tmp_path / ".gitignore").write_text("data/\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("commit", "-qm", "first")
    monkeypatch.setattr(environment, "PROJECT_ROOT", tmp_path)
    return tmp_path


def test_a_clean_tree_has_no_diff_hash(checkout: Path) -> None:
    (checkout / "data").mkdir()
    (checkout / "data" / "lab.db").write_text("runs")  # ignored: run data is not code
    code = environment.provenance()
    assert code.commit and len(code.commit) == 40
    assert (code.dirty, code.diff_sha256) == (False, None)
    assert code.label == code.commit


def test_a_changed_or_new_file_makes_the_tree_dirty_with_a_hash_of_the_change(checkout: Path) -> None:
    (checkout / "code.py").write_text("x = 2\n")
    changed = environment.provenance()
    assert changed.dirty and changed.label is not None and changed.label.endswith("-dirty")
    assert changed.diff_sha256 is not None and len(changed.diff_sha256) == 64
    (checkout / "new.py").write_text("y = 1\n")
    with_new_file = environment.provenance()
    assert with_new_file.dirty and with_new_file.diff_sha256 != changed.diff_sha256
    assert environment.provenance().diff_sha256 == with_new_file.diff_sha256  # the same change, the same hash


def test_no_git_is_no_provenance_and_no_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "PROJECT_ROOT", tmp_path)
    assert environment.provenance().commit is None
