"""Tests of lab.user_input.validation: model names, target URLs and upload names."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.user_input.validation import (
    SHELL_METACHARACTERS,
    InputError,
    ModelNameError,
    TargetUrlError,
    UploadNameError,
    safe_upload_name,
    validate_model_name,
    validate_target_url,
)

# --------------------------------------------------------------------------- model names


@pytest.mark.parametrize(
    "name",
    ["HuggingFaceTB/SmolLM2-135M-Instruct", "Qwen/Qwen3-0.6B", "gpt2", "meta-llama/Llama-3.1-8B", "org_1/name.v2"],
)
def test_hub_ids_are_accepted_unchanged(name: str) -> None:
    assert validate_model_name(name) == name


def test_an_existing_local_folder_is_accepted(tmp_path: Path) -> None:
    folder = tmp_path / "models" / "tiny"
    folder.mkdir(parents=True)
    assert validate_model_name(str(folder)) == str(folder)


def test_a_local_file_is_not_a_model_folder(tmp_path: Path) -> None:
    file = tmp_path / "model.bin"
    file.write_bytes(b"x")
    with pytest.raises(ModelNameError, match="not a folder"):
        validate_model_name(str(file))


@pytest.mark.parametrize(
    "name", ["/nonexistent/models/tiny", "./models/missing", "../no-such-lab-model-folder", "a/b/c"]
)
def test_missing_paths_say_model_folder_not_found(name: str) -> None:
    with pytest.raises(ModelNameError, match=f"model folder not found: {name}"):
        validate_model_name(name)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "model name is empty"),
        ("-h", "must not start with '-'"),
        ("--model=/etc", "must not start with '-'"),
        ("model; rm -rf /", "character ';'"),
        ("model rm", "whitespace"),
        ("model;rm", "character ';'"),
        ("a|b", "character '\\|'"),
        ("a&b", "character '&'"),
        ("$(id)", "character '\\$'"),
        ("`id`", "character '`'"),
        ("a>b", "character '>'"),
        ("~/models/x", "character '~'"),
        ("org/name*", "character '\\*'"),
        ("org\\name", "character"),
        ("org/name\n", "whitespace or control characters"),
        ("org/na\x00me", "NUL"),
        ("org/\u200bname", "U\\+200B"),
        ("x" * 600, "the limit is 512"),
        ("org/-name", "not a valid model name"),
        ("org/na..me", "not a valid Hub id"),
        ("org/", "not a valid model name"),
    ],
)
def test_bad_model_names_give_clear_messages(name: str, message: str) -> None:
    with pytest.raises(ModelNameError, match=message):
        validate_model_name(name)


def test_model_name_errors_are_value_errors() -> None:
    """Pydantic turns ValueError raised in a validator into a field error."""
    assert issubclass(ModelNameError, InputError) and issubclass(InputError, ValueError)


@settings(max_examples=300, deadline=None)
@given(
    prefix=st.text(max_size=20),
    char=st.sampled_from([*sorted(SHELL_METACHARACTERS), " ", "\t", "\n", "\r", "\x00"]),
    suffix=st.text(max_size=20),
)
def test_property_never_accepts_metacharacters_or_whitespace(prefix: str, char: str, suffix: str) -> None:
    with pytest.raises(ModelNameError):
        validate_model_name(prefix + char + suffix)


@settings(max_examples=300, deadline=None)
@given(rest=st.text(max_size=40))
def test_property_never_accepts_a_leading_dash(rest: str) -> None:
    with pytest.raises(ModelNameError):
        validate_model_name("-" + rest)


@settings(max_examples=300, deadline=None)
@given(value=st.text(max_size=60))
def test_property_accepted_names_are_safe_for_argv(value: str) -> None:
    try:
        accepted = validate_model_name(value)
    except ModelNameError:
        return
    assert accepted == value
    assert not accepted.startswith("-")
    assert not any(char in SHELL_METACHARACTERS or char.isspace() or not char.isprintable() for char in accepted)


# --------------------------------------------------------------------------- target URLs


@pytest.mark.parametrize(
    ("url", "normalised"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
        ("https://127.1.2.3", "https://127.1.2.3"),
        ("http://[::1]:8000/", "http://[::1]:8000"),
        ("HTTP://LOCALHOST:9000/proxy/", "http://localhost:9000/proxy"),
    ],
)
def test_loopback_urls_are_accepted_and_normalised(url: str, normalised: str) -> None:
    assert validate_target_url(url) == normalised


@pytest.mark.parametrize(
    ("url", "allowed", "message"),
    [
        ("ftp://127.0.0.1/x", (), "must start with http:// or https://"),
        ("file:///etc/passwd", (), "must start with http:// or https://"),
        ("127.0.0.1:8000", (), "must start with http"),
        ("", (), "target URL is empty"),
        ("http://10.0.0.1:8000", (), "not loopback"),
        ("http://169.254.169.254/latest/meta-data", (), "link-local"),
        ("http://169.254.169.254/latest/meta-data", ("169.254.169.254",), "link-local"),
        ("http://169.254.169.254", ("169.254.0.0/16",), "link-local"),
        ("http://[fe80::1]:80", ("fe80::1",), "link-local"),
        ("http://[::ffff:169.254.169.254]/", (), "link-local"),
        ("http://metadata.google.internal/computeMetadata/v1/", ("metadata.google.internal",), "metadata"),
        ("http://[fd00:ec2::254]/", ("fd00:ec2::254",), "metadata"),
        ("http://0.0.0.0:8000", (), "unspecified"),
        ("http://user:pw@127.0.0.1:8000", (), "user name or password"),
        ("http://127.0.0.1@10.0.0.1:8000", (), "user name or password"),
        ("http://127.0.0.1:8000/?q=1", (), "without a query"),
        ("http://127.0.0.1:8000/#frag", (), "fragment"),
        ("http://127.0.0.1:99999", (), "malformed"),
        ("http://127.0.0.1:8000/a b", (), "whitespace"),
        ("http://127.0.0.1:8000\n", (), "whitespace"),
        ("http:///path", (), "has no host"),
    ],
)
def test_bad_target_urls_are_refused(url: str, allowed: tuple[str, ...], message: str) -> None:
    with pytest.raises(TargetUrlError, match=message):
        validate_target_url(url, allowed_hosts=allowed)


@pytest.mark.parametrize("allowed", [("10.0.0.1",), ("10.0.0.0/8",), (" 10.0.0.1 ",)])
def test_a_private_address_is_accepted_when_allowed(allowed: tuple[str, ...]) -> None:
    assert validate_target_url("http://10.0.0.1:8000/", allowed_hosts=allowed) == "http://10.0.0.1:8000"


def test_an_allowed_ipv6_host_matches_with_or_without_brackets() -> None:
    assert validate_target_url("http://[2001:db8::5]:80", allowed_hosts=["[2001:db8::5]"]) == "http://[2001:db8::5]:80"


def fake_resolver(table: dict[str, list[str]]):
    def getaddrinfo(host, port, *args, **kwargs):
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))
            for address in table[host]
        ]

    return getaddrinfo


def test_an_allowed_host_name_is_resolved_and_every_address_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        socket,
        "getaddrinfo",
        fake_resolver({"gpu-box.lab": ["10.1.2.3"], "sneaky.lab": ["10.1.2.4", "169.254.169.254"]}),
    )
    assert validate_target_url("http://GPU-box.lab:8000", allowed_hosts=["gpu-box.lab"]) == "http://gpu-box.lab:8000"
    with pytest.raises(TargetUrlError, match=re.escape("resolves to 169.254.169.254 is a link-local")):
        validate_target_url("http://sneaky.lab:8000", allowed_hosts=["sneaky.lab"])
    with pytest.raises(TargetUrlError, match="not loopback"):
        validate_target_url("http://gpu-box.lab:8000")
    with pytest.raises(TargetUrlError, match=re.escape("cannot resolve host 'unknown.lab'")):
        validate_target_url("http://unknown.lab:8000", allowed_hosts=["unknown.lab"])


def test_a_host_name_that_resolves_only_to_loopback_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "getaddrinfo", fake_resolver({"myhost": ["127.0.1.1", "::1"]}))
    assert validate_target_url("http://myhost:8000") == "http://myhost:8000"


def test_localhost_resolving_elsewhere_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "getaddrinfo", fake_resolver({"localhost": ["127.0.0.1", "10.9.9.9"]}))
    with pytest.raises(TargetUrlError, match=re.escape("use 127.0.0.1")):
        validate_target_url("http://localhost:8000")


# --------------------------------------------------------------------------- upload names


@pytest.mark.parametrize("name", ["sharegpt.json", "my chats (2).json", "données.jsonl", "..hidden.json"])
def test_plain_upload_names_are_kept(name: str) -> None:
    assert safe_upload_name(name) == name


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("../../etc/passwd", "not a path"),
        ("..\\x", "not a path"),
        ("/etc/passwd", "not a path"),
        ("C:\\Windows\\x.json", "not a path"),
        ("a\x00b.json", "NUL"),
        ("line\nbreak.json", "control characters"),
        ("..", "not a file name"),
        (".", "not a file name"),
        ("", "empty"),
        ("   ", "empty"),
        ("x" * 300, "the limit is 255"),
    ],
)
def test_upload_names_that_could_be_paths_are_refused(name: str, message: str) -> None:
    with pytest.raises(UploadNameError, match=message):
        safe_upload_name(name)


# --------------------------------------------------------------------------- model on this machine


def test_an_offline_machine_refuses_a_hub_id_it_does_not_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lab.user_input.validation import ModelNameError, check_model_on_machine, machine_is_offline

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert machine_is_offline()
    with pytest.raises(ModelNameError, match="neither a local folder nor in the Hugging Face cache"):
        check_model_on_machine("nobody/not-here")
    check_model_on_machine(str(tmp_path))  # a local folder is always fine
    monkeypatch.setattr("lab.user_input.validation.ask_hub", lambda model, **_: "found")
    check_model_on_machine("nobody/not-here", offline=False)  # online and on the Hub: the server downloads it


def test_an_offline_machine_accepts_a_hub_id_in_its_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lab.user_input.validation import check_model_on_machine

    # The cache layout huggingface_hub reads: models--org--name/refs/main and a snapshot.
    repo = tmp_path / "models--org--cached"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    check_model_on_machine("org/cached", offline=True)
