"""Files a spec names are regular files under a size limit, read with a bound (issue 25,
item 4): a FIFO, /dev/zero, a folder, a socket and a file over the limit are refused in one
line naming the path and the rule, at validation and when the run reads them, without
blocking and without reading past the limit. No process is started (a FIFO is only a name)."""

from __future__ import annotations

import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.cli import entry as cli
from lab.specs.schema import RunSpec, SpecError
from lab.workloads import datasets, sharegpt_reader
from lab.workloads.input_files import InputFileError, check_input_path, file_problem, read_input_text
from lab.workloads.uploads import list_uploads

REQUEST = '{"messages": [{"role": "user", "content": "hi"}]}\n'


@pytest.fixture()
def special_files(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """A FIFO, /dev/zero (and a link to it), a folder and a Unix socket, each a path a spec could name."""
    fifo = tmp_path / "requests.jsonl"
    os.mkfifo(fifo)
    link = tmp_path / "zero.jsonl"
    link.symlink_to("/dev/zero")
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "socket.jsonl"))
    yield {
        "FIFO (named pipe)": fifo,
        "character device": Path("/dev/zero"),
        "character device ": link,
        "folder": folder,
        "socket": tmp_path / "socket.jsonl",
    }
    server.close()


def test_the_rule_names_each_kind_of_special_file() -> None:
    for mode, kind in (
        (stat.S_IFIFO, "a FIFO"),
        (stat.S_IFCHR, "a character device"),
        (stat.S_IFBLK, "a block device"),
        (stat.S_IFSOCK, "a socket"),
        (stat.S_IFDIR, "a folder"),
    ):
        problem = file_problem("/p", mode | 0o644, 0, max_bytes=10)
        assert (
            problem == f"/p is {kind}{' (named pipe)' if kind == 'a FIFO' else ''}, not a regular file: "
            "the lab reads requests, datasets, spec files and imports only from regular files"
        )
    assert file_problem("/p", stat.S_IFREG | 0o644, 10, max_bytes=10) is None
    too_big = file_problem("/p", stat.S_IFREG | 0o644, 11, max_bytes=10)
    assert too_big is not None and "larger than 10 bytes, the limit" in too_big


def test_special_files_are_refused_at_once_when_read(special_files: dict[str, Path]) -> None:
    for kind, path in special_files.items():
        began = time.monotonic()
        for read in (datasets.load_custom_requests, lambda p: list(sharegpt_reader.iter_sharegpt_conversations(p))):
            with pytest.raises(InputFileError) as error:
                read(path)
            message = str(error.value)
            assert message.startswith(str(path)) and kind.strip() in message and "regular files" in message, message
            assert "\n" not in message
        assert time.monotonic() - began < 2  # a FIFO without a writer never blocks the reader


def test_special_files_are_refused_by_spec_validation(special_files: dict[str, Path]) -> None:
    for path in special_files.values():
        for workload in (
            {"kind": "custom", "requests_path": str(path)},
            {"kind": "sharegpt-chat", "dataset_path": str(path)},
        ):
            with pytest.raises(ValueError, match="not a regular file: the lab reads requests, datasets"):
                RunSpec.model_validate({"workload": workload})


def test_the_cli_refuses_a_fifo_and_dev_zero_in_one_line(
    special_files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LAB_DATA_DIR", str(tmp_path / "data"))
    from lab.settings import get_settings

    get_settings.cache_clear()
    for path in (special_files["FIFO (named pipe)"], Path("/dev/zero")):
        code = cli.main(
            [
                "run",
                "--preset",
                "seed-exp1",
                "--quick",
                "--set",
                "workload.kind=custom",
                "--set",
                f"workload.requests_path={path}",
            ]
        )
        error = capsys.readouterr().err
        assert code == 2 and len(error.splitlines()) == 1 and str(path) in error and "regular file" in error, error
    assert not (tmp_path / "data" / "lab.db").exists()
    get_settings.cache_clear()


def test_a_file_over_the_limit_is_refused_and_never_read_past_it(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    big.write_text(REQUEST * 100)
    with pytest.raises(InputFileError, match=f"{big} is larger than 1.0 KiB, the limit .*LAB_INPUT_FILE_MAX_BYTES"):
        read_input_text(big, what="request file", max_bytes=1024)
    with pytest.raises(InputFileError, match="larger than"):
        check_input_path(big, max_bytes=1024)
    assert read_input_text(big, what="request file", max_bytes=len(REQUEST) * 100) == REQUEST * 100


def test_a_file_that_claims_no_size_is_still_read_with_the_bound() -> None:
    # /proc files say 0 bytes and may be long: the bound counts what is read.
    with pytest.raises(InputFileError, match="larger than 16 bytes"):
        read_input_text("/proc/self/status", what="request file", max_bytes=16)


def test_settings_limit_applies_to_workload_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lab.settings import get_settings

    requests = tmp_path / "requests.jsonl"
    requests.write_text(REQUEST * 10)
    monkeypatch.setenv("LAB_INPUT_FILE_MAX_BYTES", "100")
    get_settings.cache_clear()
    try:
        with pytest.raises(InputFileError, match="larger than 100 bytes"):
            datasets.load_custom_requests(requests)
        with pytest.raises(ValueError, match="larger than 100 bytes"):
            RunSpec.model_validate({"workload": {"kind": "custom", "requests_path": str(requests)}})
    finally:
        monkeypatch.delenv("LAB_INPUT_FILE_MAX_BYTES")
        get_settings.cache_clear()
    assert len(datasets.load_custom_requests(requests)) == 10


def test_a_missing_file_passes_validation_and_fails_when_read(tmp_path: Path) -> None:
    missing = tmp_path / "gone.jsonl"
    RunSpec.model_validate({"workload": {"kind": "custom", "requests_path": str(missing)}})  # a stored spec still loads
    with pytest.raises(InputFileError, match=f"request file not found: {missing}"):
        datasets.load_custom_requests(missing)


def test_uploads_listing_offers_regular_files_only(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(REQUEST)
    os.mkfifo(tmp_path / "b.jsonl")
    os.mkfifo(tmp_path / "a.jsonl.meta.json")  # a sidecar that is a FIFO: ignored, never waited on
    assert [label for _, label in list_uploads(tmp_path, "jsonl")] == ["a.jsonl"]


def test_spec_error_type_is_what_the_cli_prints() -> None:
    assert issubclass(InputFileError, ValueError) and issubclass(
        SpecError, ValueError
    )  # one-line errors reach the CLI as ValueErrors


def test_a_fifo_or_device_given_as_spec_is_refused_at_once(
    special_files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--spec FIFO`` used to block the CLI on the read; it now goes through the same gate
    (opened without blocking, refused on its mode), so the FIFO is never read."""
    monkeypatch.setenv("LAB_DATA_DIR", str(tmp_path / "data"))
    from lab.settings import get_settings

    get_settings.cache_clear()
    fifo = tmp_path / "spec.json"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path / "folder.json"):
        path.parent.mkdir(exist_ok=True)
        if path.name == "folder.json":
            path.mkdir()
        code = cli.main(["run", "--spec", str(path)])
        error = capsys.readouterr().err
        assert code == 2 and len(error.splitlines()) == 1 and str(path) in error and "regular file" in error, error
    assert not (tmp_path / "data" / "lab.db").exists()
    get_settings.cache_clear()


def test_a_spec_file_over_its_limit_is_refused(tmp_path: Path) -> None:
    from lab.specs.spec_files import MAX_SPEC_FILE_BYTES, load_spec_file

    big = tmp_path / "big.json"
    big.write_text("{" + " " * MAX_SPEC_FILE_BYTES + "}")
    with pytest.raises(SpecError, match=r"larger than .*the limit for spec files"):
        load_spec_file(big)
