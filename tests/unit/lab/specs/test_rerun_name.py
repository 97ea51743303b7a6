"""A rerun of an exported run is named after what it runs (issue 39): the name follows an edit
of the file or a ``--set``, unless a name is set by hand."""

from __future__ import annotations

import json
from pathlib import Path

from lab.settings import get_settings
from lab.specs.schema import LoadSpec, RunSpec
from lab.specs.spec_files import load_spec_file, run_spec_document


def exported(tmp_path: Path) -> Path:
    spec = RunSpec(backend="naive", model=get_settings().default_model, max_tokens=32, load=LoadSpec(vus=1))
    document = run_spec_document(
        run_id=2, stored_spec=spec.model_dump(mode="json"), cell_label="vus=1", experiment_name="first"
    )
    path = tmp_path / "run-2-spec.json"
    path.write_text(json.dumps(document))
    return path


def test_the_export_is_named_after_its_run_and_what_it_runs(tmp_path: Path) -> None:
    spec = load_spec_file(exported(tmp_path))
    assert spec.name == "rerun of run #2: naive, 1 VU, max tokens 32, number-story"


def test_a_changed_setting_renames_the_rerun_and_a_name_given_stays(tmp_path: Path) -> None:
    path = exported(tmp_path)
    assert load_spec_file(path, overrides=[("load.vus", 2)]).name.startswith("rerun of run #2: naive, 2 VUs,")
    assert load_spec_file(path, overrides=[("load.vus", 2), ("name", "mine")]).name == "mine"
