"""Validation of what users type or upload: model names, target URLs, upload names.

Plain functions that return the accepted (normalised) value or raise a ``ValueError``
subclass whose message a user can act on. They run wherever a value enters the lab (the
web form, the CLI, the run spec), so that nothing unsafe reaches an argv list, a URL k6
will call, or a path on disk.

- :func:`validate_model_name`: a local model folder or a Hugging Face Hub id; never an
  option (leading ``-``), never shell metacharacters, whitespace or control characters.
- :func:`validate_target_url`: http(s) only; loopback always, any other host only when
  the user allowed it explicitly; never link-local or cloud metadata addresses, even if
  allowed; no user:password part. Host names are resolved and every address checked.
- :func:`safe_upload_name`: an uploaded file's original name, kept as metadata only: a
  plain file name, never a path.
- :func:`check_model_on_machine`: at launch, refuse a Hub id that is neither a local
  folder nor in the local Hugging Face cache while the machine is offline, or that the Hub
  (asked with a short timeout) does not know or does not answer for (it would fail a
  minute later, after the server's download retries).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import unicodedata
from collections.abc import Collection
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

MAX_MODEL_NAME_LENGTH = 512
MAX_HUB_ID_PART_LENGTH = 96
MAX_URL_LENGTH = 2048
MAX_UPLOAD_NAME_LENGTH = 255

# Characters a shell (or an argv consumer that re-splits) could interpret.
SHELL_METACHARACTERS = frozenset(";|&$`<>(){}[]*?!~'\"\\")

# Hub ids: "name" or "org/name"; letters, digits, '.', '_', '-'; no leading punctuation.
_HUB_ID_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

# Host names of cloud instance metadata services: never a load target.
METADATA_HOSTNAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "metadata.azure.com",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.packet.net",
        "metadata.platformequinix.com",
    }
)
# Metadata addresses outside the link-local ranges (AWS IPv6, Alibaba Cloud is link-local).
_METADATA_ADDRESSES = frozenset({ipaddress.ip_address("fd00:ec2::254")})
_LINK_LOCAL_NETWORKS = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))


class InputError(ValueError):
    """A user-supplied value was refused; the message says why and what is allowed."""


class ModelNameError(InputError):
    """A model name is unsafe, malformed, or names a local folder that does not exist."""


class TargetUrlError(InputError):
    """A target URL is not http(s), not loopback and not allowed, or points somewhere forbidden."""


class UploadNameError(InputError):
    """An upload's original file name is empty, a path, or carries control characters."""


# --------------------------------------------------------------------------- model names


def _describe_char(char: str) -> str:
    """A printable description of one character for an error message."""
    if char == "\x00":
        return "NUL"
    if char.isprintable() and not char.isspace():
        return repr(char)
    return f"U+{ord(char):04X}"


def validate_model_name(value: str) -> str:
    """Accept a local model folder path or a Hub id (``org/name``); return it unchanged.

    Refused, with a message naming the problem: an empty value, a value longer than
    ``MAX_MODEL_NAME_LENGTH``, a leading ``-`` (it would be read as an option), whitespace
    or control characters (newlines, NUL), shell metacharacters ``;|&$`<>(){}[]*?!~'"\\``,
    a value that looks like a path (starts with ``/`` or ``.``, or has more than one
    ``/``) but is no existing folder ("model folder not found: ..."), and anything else
    that is not a well-formed Hub id.
    """
    if not isinstance(value, str):
        raise ModelNameError(f"model name must be text, got {type(value).__name__}")
    if not value:
        raise ModelNameError("model name is empty: give a local model folder or a Hub id like org/name")
    if len(value) > MAX_MODEL_NAME_LENGTH:
        raise ModelNameError(f"model name is {len(value)} characters long; the limit is {MAX_MODEL_NAME_LENGTH}")
    for char in value:
        if char.isspace() or unicodedata.category(char)[0] == "C":
            raise ModelNameError(
                f"model name must not contain whitespace or control characters (found {_describe_char(char)})"
            )
        if char in SHELL_METACHARACTERS:
            raise ModelNameError(
                f"model name must not contain the character {char!r}: "
                "give a plain folder path or a Hub id like org/name"
            )
    if value.startswith("-"):
        raise ModelNameError("model name must not start with '-' (it would be read as a command-line option)")

    looks_like_path = value.startswith(("/", ".")) or value.count(os.sep) > 1
    path = Path(value)
    if path.exists():
        if not path.is_dir():
            raise ModelNameError(f"model path is not a folder: {value}")
        return value
    if looks_like_path:
        raise ModelNameError(f"model folder not found: {value}")

    parts = value.split("/")
    for part in parts:
        if not _HUB_ID_PART.fullmatch(part) or len(part) > MAX_HUB_ID_PART_LENGTH:
            raise ModelNameError(
                f"not a valid model name: {value!r}; give an existing local folder or a Hub id like "
                "org/name (letters, digits, '.', '_', '-')"
            )
        if ".." in part or "--" in part or part.endswith("."):
            raise ModelNameError(f"not a valid Hub id: {value!r} ('..', '--' and a trailing '.' are not allowed)")
    return value


def machine_is_offline() -> bool:
    """True when Hugging Face downloads cannot work: ``HF_HUB_OFFLINE`` is set, or the machine
    has no default route (read from /proc, no network call)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    routes = ((Path("/proc/net/route"), "00000000"), (Path("/proc/net/ipv6_route"), "0" * 32 + " 00"))
    readable = False
    for path, default_prefix in routes:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if path.name == "route" and len(fields) > 1 and fields[1] == default_prefix:
                return False
            if path.name == "ipv6_route" and line.startswith(default_prefix) and fields[-1] != "lo":
                return False
    return readable  # no default route anywhere; where /proc says nothing, assume online


def in_hub_cache(model: str) -> bool:
    """True when the local Hugging Face cache holds ``model``'s config (no network call)."""
    from huggingface_hub import try_to_load_from_cache

    cache_dir = os.environ.get("HF_HUB_CACHE") or None
    try:
        found = try_to_load_from_cache(model, "config.json", cache_dir=cache_dir)
    except ValueError:  # not a valid repo id
        return False
    return isinstance(found, str)


# How long the launch check waits for the Hub, and how long its answer is reused.
HUB_TIMEOUT_S = 3.0
HUB_ANSWER_KEPT_S = 60.0
DEFAULT_HUB_ENDPOINT = "https://huggingface.co"
_hub_answers: dict[tuple[str, str], tuple[float, str]] = {}


def hub_endpoint() -> str:
    """The Hub's base URL: ``HF_ENDPOINT`` (as huggingface_hub reads it), else huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_HUB_ENDPOINT).rstrip("/")


def ask_hub(model: str, *, timeout_s: float = HUB_TIMEOUT_S) -> str:
    """Whether the Hub knows ``model``: ``"found"``, ``"missing"`` (404, or 401/403: the Hub's
    answer for a repository that does not exist or is not yours) or ``"unreachable"`` (no answer
    within ``timeout_s``, or an error). Answers are reused for a minute."""
    import time

    import httpx

    key = (hub_endpoint(), model)
    kept = _hub_answers.get(key)
    if kept is not None and time.monotonic() - kept[0] < HUB_ANSWER_KEPT_S:
        return kept[1]
    token = os.environ.get("HF_TOKEN")
    try:
        response = httpx.get(
            f"{key[0]}/api/models/{model}",
            timeout=timeout_s,
            follow_redirects=True,
            headers={"Authorization": f"Bearer {token}"} if token else None,
        )
        answer = (
            "found"
            if response.status_code == 200
            else ("missing" if response.status_code in (401, 403, 404) else "unreachable")
        )
    except httpx.HTTPError:
        answer = "unreachable"
    _hub_answers[key] = (time.monotonic(), answer)
    return answer


def check_model_on_machine(model: str, *, offline: bool | None = None) -> None:
    """Refuse (:class:`ModelNameError`) a model that is neither a local folder nor in the local
    Hugging Face cache when it cannot be downloaded: the machine is offline, or the Hub (asked
    with a short timeout) does not know it or does not answer."""
    if Path(model).is_dir() or in_hub_cache(model):
        return
    if machine_is_offline() if offline is None else offline:
        raise ModelNameError(
            f"model {model!r} is neither a local folder nor in the Hugging Face cache, and this machine is offline "
            "(HF_HUB_OFFLINE is set or there is no network), so it cannot be downloaded: give a local model "
            "folder, e.g. models/SmolLM2-135M-Instruct"
        )
    answer = ask_hub(model)
    if answer == "missing":
        raise ModelNameError(
            f"model {model!r} is neither a local folder nor in the Hugging Face cache, and the "
            f"Hub ({hub_endpoint()}) has no model of that name: check its spelling"
        )
    if answer == "unreachable":
        raise ModelNameError(
            f"model {model!r} is neither a local folder nor in the Hugging Face cache, and the "
            f"Hub ({hub_endpoint()}) did not answer within {HUB_TIMEOUT_S:g} s, so it cannot "
            "be downloaded: give a local model folder, e.g. models/SmolLM2-135M-Instruct"
        )


# --------------------------------------------------------------------------- target URLs


def _is_forbidden_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why an address may never be a target (link-local, metadata, unspecified), or None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if any(address in network for network in _LINK_LOCAL_NETWORKS) or address.is_link_local:
        return f"{address} is a link-local address (cloud metadata services live there)"
    if address in _METADATA_ADDRESSES:
        return f"{address} is a cloud metadata address"
    if address.is_unspecified:
        return f"{address} is the unspecified address; use 127.0.0.1 for this machine"
    if address.is_multicast:
        return f"{address} is a multicast address"
    return None


def _is_loopback(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def _host_is_allowed(
    host: str, address: ipaddress.IPv4Address | ipaddress.IPv6Address | None, allowed_hosts: Collection[str]
) -> bool:
    """Whether ``host`` (or its literal address) is named in ``allowed_hosts``.

    Entries are host names or addresses (case-insensitive, IPv6 with or without
    brackets) or networks in CIDR form (``10.0.0.0/8``).
    """
    for entry in allowed_hosts:
        normalised = entry.strip().lower().strip("[]").rstrip(".")
        if not normalised:
            continue
        if "/" in normalised:
            if address is None:
                continue
            try:
                if address in ipaddress.ip_network(normalised, strict=False):
                    return True
            except ValueError:
                continue
            continue
        if normalised == host:
            return True
        if address is not None:
            try:
                if ipaddress.ip_address(normalised) == address:
                    return True
            except ValueError:
                pass
    return False


def _resolve(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Every address ``host`` resolves to (``socket.getaddrinfo``)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError) as error:
        raise TargetUrlError(f"cannot resolve host {host!r}: {error}") from error
    addresses = []
    for info in infos:
        raw = str(info[4][0]).split("%", 1)[0]
        try:
            addresses.append(ipaddress.ip_address(raw))
        except ValueError:
            continue
    if not addresses:
        raise TargetUrlError(f"host {host!r} resolved to no IP address")
    return addresses


def validate_target_url(url: str, *, allowed_hosts: Collection[str] = ()) -> str:
    """Accept the base URL of a server to load; return it normalised (no trailing ``/``).

    Allowed: ``http``/``https`` URLs whose host is loopback (127.0.0.0/8, ``::1``,
    ``localhost``) or is named in ``allowed_hosts`` (host names, addresses or CIDR
    networks). Host names are resolved with ``socket.getaddrinfo``: every address must be
    loopback, unless the name is allowed. Refused always, even when allowed: link-local
    addresses (169.254.0.0/16, fe80::/10, where cloud metadata services answer), cloud
    metadata host names such as ``metadata.google.internal``, the unspecified address,
    ``user:password@`` parts, queries and fragments.

    The check holds when it runs; a host name could resolve differently later (DNS
    rebinding), so the load tool should also refuse redirects (k6 ``maxRedirects: 0``).
    """
    scheme, parts, host, port = _split_target_url(url)
    effective_port = port if port is not None else (443 if scheme == "https" else 80)
    literal = _check_target_host(host, effective_port, allowed_hosts)
    netloc = f"[{host}]" if literal is not None and literal.version == 6 else host
    if port is not None:
        netloc = f"{netloc}:{port}"
    return f"{scheme}://{netloc}{parts.path.rstrip('/')}"


def _split_target_url(url: str) -> tuple[str, SplitResult, str, int | None]:
    """``(scheme, parts, host, port)`` of a target URL that passes the checks of its text alone:
    length, characters, scheme, no user part, query or fragment, a host that is no zone id
    and no cloud metadata name."""
    if not isinstance(url, str):
        raise TargetUrlError(f"target URL must be text, got {type(url).__name__}")
    if not url:
        raise TargetUrlError("target URL is empty; give a base URL like http://127.0.0.1:8000")
    if len(url) > MAX_URL_LENGTH:
        raise TargetUrlError(f"target URL is {len(url)} characters long; the limit is {MAX_URL_LENGTH}")
    if any(char.isspace() or unicodedata.category(char)[0] == "C" for char in url):
        raise TargetUrlError("target URL must not contain whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise TargetUrlError(f"target URL is malformed: {error}") from error
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        shown = f"{parts.scheme}://" if parts.scheme else "no scheme"
        raise TargetUrlError(f"target URL must start with http:// or https:// (got {shown})")
    if "@" in parts.netloc:
        raise TargetUrlError("target URL must not contain a user name or password (user:password@host)")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise TargetUrlError("target URL must be a base URL without a query (?...) or fragment (#...)")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise TargetUrlError("target URL has no host; give a base URL like http://127.0.0.1:8000")
    if "%" in host:
        raise TargetUrlError("target URL must not carry an IPv6 zone id (%...)")
    if host in METADATA_HOSTNAMES or host.endswith(".metadata.google.internal"):
        raise TargetUrlError(f"host {host!r} is a cloud metadata service and can never be a target")
    return scheme, parts, host, port


def _check_target_host(
    host: str, port: int, allowed_hosts: Collection[str]
) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """Refuse a host that is (or resolves to) a forbidden address, or that is not loopback
    and not allowed; return its address when the host is a literal one, else None."""
    literal: ipaddress.IPv4Address | ipaddress.IPv6Address | None
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None

    allowed = _host_is_allowed(host, literal, allowed_hosts)
    if literal is not None:
        reason = _is_forbidden_address(literal)
        if reason:
            raise TargetUrlError(f"target URL refused: {reason}")
        if not _is_loopback(literal) and not allowed:
            raise TargetUrlError(_not_allowed_message(host))
        return literal
    addresses = _resolve(host, port)
    for address in addresses:
        reason = _is_forbidden_address(address)
        if reason:
            raise TargetUrlError(f"target URL refused: {host!r} resolves to {reason}")
    if not allowed and not all(_is_loopback(address) for address in addresses):
        if host == "localhost":
            raise TargetUrlError("'localhost' resolves to a non-loopback address here; use 127.0.0.1")
        raise TargetUrlError(_not_allowed_message(host))
    return None


def _not_allowed_message(host: str) -> str:
    return (
        f"host {host!r} is not loopback; only 127.0.0.1, ::1 and localhost are allowed unless the host is "
        "listed in the allowed target hosts (LAB_ALLOWED_TARGET_HOSTS)"
    )


# --------------------------------------------------------------------------- upload names


def safe_upload_name(original_name: str) -> str:
    """Check an uploaded file's original name; return it (trimmed) for display and metadata.

    The name is never used as a path (uploads are stored under generated names); it is
    still refused when it is empty, longer than ``MAX_UPLOAD_NAME_LENGTH``, carries a
    path separator (``/`` or ``\\``), is ``.`` or ``..``, or contains NUL or other control
    characters, so that no traversal attempt reaches a log, a page or a later caller.
    """
    if not isinstance(original_name, str):
        raise UploadNameError(f"upload name must be text, got {type(original_name).__name__}")
    name = original_name.strip()
    if not name:
        raise UploadNameError("upload name is empty")
    if len(name) > MAX_UPLOAD_NAME_LENGTH:
        raise UploadNameError(f"upload name is {len(name)} characters long; the limit is {MAX_UPLOAD_NAME_LENGTH}")
    for char in name:
        if char == "\x00" or unicodedata.category(char)[0] == "C":
            raise UploadNameError(f"upload name must not contain control characters (found {_describe_char(char)})")
    if "/" in name or "\\" in name:
        raise UploadNameError(f"upload name must be a plain file name, not a path: {name!r}")
    if name in (".", ".."):
        raise UploadNameError(f"upload name {name!r} is not a file name")
    return name
