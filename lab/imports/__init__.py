"""Results of the tools a lab already runs (GuideLLM, ``vllm bench serve``, AIPerf), read into
the lab's own shape: one :class:`ImportedRun` per benchmark in a file.

Each tool is one module declaring a :class:`PeerTool` and registering it here (the order
below is the order a file is tried in). A tool says whether a document is its own
(:meth:`PeerTool.claims`), which version wrote it, and maps its figures onto the lab's names
only where the definition is the same (docs/imports.md lists every figure); the rest stay
under the tool's own names in a :class:`~lab.measurement.results.ForeignFigures`.

:func:`read_result_file` is the one door: the file goes through the gate every user file
goes through (:mod:`lab.workloads.input_files`: a regular file under a size limit), then
it is parsed, its tool found and its version checked. Every refusal is one line naming the
file and what was expected (:class:`ImportFileError`); storing is :mod:`lab.imports.saving`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from lab.measurement.k6_ndjson import RequestSamples
from lab.measurement.results import RunResults
from lab.user_input.json_errors import json_error_text
from lab.workloads.input_files import InputFileError, input_file_max_bytes, read_input_bytes

IMPORT_LIMIT_NAME = "the limit for imported result files (LAB_INPUT_FILE_MAX_BYTES)"
YAML_SUFFIXES = (".yaml", ".yml")


class ImportFileError(ValueError):
    """A file that is not imported; the message (one line) names the file and what was expected."""


@dataclass(frozen=True)
class ImportedLoad:
    """How the tool applied load: the lab's load kinds where they are the same (``constant-vus``
    for a fixed concurrency, ``constant-arrival-rate`` for evenly spaced arrivals), else the
    tool's own name (``poisson``, ``throughput``, ``synchronous``...)."""

    kind: str
    vus: int | None = None
    rate_per_s: float | None = None
    duration_s: float = 0.0


@dataclass(frozen=True)
class ImportedRun:
    """One benchmark of a tool's file, as the lab stores a run."""

    tool: str
    version: str
    index: int
    label: str
    target: str | None
    model: str
    load: ImportedLoad
    results: RunResults
    stream: bool | None = None
    max_tokens: int | None = None
    prompt_tokens: int | None = None
    samples: RequestSamples | None = None
    # Why the file gives no per-request samples (or only some), for the regression gate.
    samples_note: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def source(self) -> str:
        """``guidellm 0.8.1``: how runs are labelled with their source tool."""
        return f"{self.tool} {self.version}"


class PeerTool:
    """One tool whose result files the lab imports (subclasses declare and parse)."""

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    # What a file of this tool is, for refusals ("a GuideLLM benchmark report (JSON or YAML)").
    expected: ClassVar[str] = ""
    # The versions imported, in words ("0.8.x").
    supported: ClassVar[str] = ""

    def claims(self, document: Mapping[str, Any]) -> bool:
        """True when ``document`` is this tool's result (by its shape)."""
        raise NotImplementedError

    def version(self, document: Mapping[str, Any]) -> str:
        """The version that wrote ``document`` ("unknown" when it says none)."""
        raise NotImplementedError

    def is_supported(self, version: str) -> bool:
        raise NotImplementedError

    def runs(self, document: Mapping[str, Any], *, version: str) -> list[ImportedRun]:
        """Every benchmark of the document; KeyError, TypeError or ValueError when a part is missing."""
        raise NotImplementedError


TOOLS: dict[str, PeerTool] = {}


def register(cls: type[PeerTool]) -> type[PeerTool]:
    """Class decorator: add a tool to the registry (its name must be new)."""
    if not cls.name or cls.name in TOOLS:
        raise ValueError(f"cannot register import tool {cls.name!r}: empty or taken")
    TOOLS[cls.name] = cls()
    return cls


def expected_files() -> str:
    """Every importable kind of file, in words, for messages and help."""
    return "; ".join(f"{tool.expected}, version {tool.supported}" for tool in TOOLS.values())


@dataclass(frozen=True)
class ParsedFile:
    """A file read and understood: its tool, version, content hash and runs."""

    file_name: str
    sha256: str
    tool: str
    version: str
    runs: list[ImportedRun]


class _YamlError(ValueError):
    """A YAML file that does not parse (the first line of the parser's message)."""


def _yaml(text: str) -> Any:
    import yaml  # type: ignore[import-untyped]  # no stubs in the lab's venv; only YAML reports need it

    try:
        # libyaml's safe loader where built (PyYAML's wheels have it): the pure-Python one takes seconds
        # on a deeply nested file before it gives up; libyaml stops at its nesting limit at once.
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as error:
        raise _YamlError(str(error).splitlines()[0] if str(error) else "unreadable") from None


def _document(name: str, content: bytes, suffix: str) -> dict[str, Any]:
    """The file's top-level table (JSON, or YAML by its suffix); ImportFileError otherwise."""
    what = f"expected {expected_files()}"
    if not content.strip():
        raise ImportFileError(f"{name} is empty; {what}")
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise ImportFileError(f"{name} is not UTF-8 text; {what}") from None
    try:
        document = _yaml(text) if suffix in YAML_SUFFIXES else json.loads(text)
    except RecursionError:
        raise ImportFileError(f"{name} is nested deeper than {MAX_NESTING_DEPTH} levels; {what}") from None
    except json.JSONDecodeError as error:
        # A whole JSON document ends with its closing bracket; one cut short does not.
        cut = " (it ends early: truncated?)" if not text.rstrip().endswith(("}", "]")) else ""
        raise ImportFileError(f"{name} is not valid JSON{cut}: {json_error_text(error)}; {what}") from None
    except _YamlError as error:
        raise ImportFileError(f"{name} is not valid YAML ({error}); {what}") from None
    if not isinstance(document, dict):
        raise ImportFileError(f"{name} holds a {type(document).__name__} at its top, not a result table; {what}")
    if nesting_depth(document) > MAX_NESTING_DEPTH:
        raise ImportFileError(f"{name} is nested deeper than {MAX_NESTING_DEPTH} levels; {what}")
    return document


# No tool's result nests near this deep (GuideLLM's reports about 8 levels); deeper is not a result.
MAX_NESTING_DEPTH = 64


def nesting_depth(document: Any) -> int:
    """How deep lists and tables nest in ``document`` (1 for a flat one), without recursion."""
    deepest, stack = 0, [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            if depth > MAX_NESTING_DEPTH:
                return depth
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
    return deepest


def parse_result(name: str, content: bytes, *, suffix: str = ".json") -> ParsedFile:
    """``content`` (a file named ``name``) read as a tool's result; ImportFileError naming the
    file and what was expected when it is empty, not JSON/YAML, truncated, of no known tool,
    of a version not supported, or missing a part its tool always writes."""
    document = _document(name, content, suffix.lower())
    tool = next((tool for tool in TOOLS.values() if tool.claims(document)), None)
    if tool is None:
        raise ImportFileError(f"{name} is not the result of a tool the lab imports; expected {expected_files()}")
    version = tool.version(document)
    if not tool.is_supported(version):
        raise ImportFileError(
            f"{name} was written by {tool.label} {version}; the lab imports {tool.label} {tool.supported}"
        )
    try:
        runs = tool.runs(document, version=version)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as error:
        missing = f"no {error}" if isinstance(error, KeyError) else str(error).splitlines()[0]
        raise ImportFileError(
            f"{name} is not a complete {tool.expected} ({missing[:120]}); expected what {tool.label} "
            f"{tool.supported} writes"
        ) from None
    if not runs:
        raise ImportFileError(f"{name} holds no benchmark; expected {tool.expected} with at least one")
    return ParsedFile(name, hashlib.sha256(content).hexdigest(), tool.name, version, runs)


def read_result_file(path: Path | str, *, max_bytes: int | None = None) -> ParsedFile:
    """The file at ``path`` through the users' file gate, then :func:`parse_result`."""
    file_path = Path(path)
    try:
        content = read_input_bytes(
            file_path, what="result file", max_bytes=max_bytes or input_file_max_bytes(), limit_name=IMPORT_LIMIT_NAME
        )
    except InputFileError as error:
        raise ImportFileError(str(error)) from None
    return parse_result(file_path.name, content, suffix=file_path.suffix)


# Helpers the tools share.


def number(value: Any) -> float | None:
    """A finite number, else None (tools write NaN, null or strings such as "inf")."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def milliseconds(value: Any) -> float | None:
    """A figure in milliseconds as seconds (None stays None)."""
    found = number(value)
    return None if found is None else found / 1000.0


def moment(epoch_s: Any) -> datetime | None:
    """A Unix time in seconds as an aware UTC datetime."""
    found = number(epoch_s)
    return None if found is None or found <= 0 else datetime.fromtimestamp(found, UTC)


def samples_of(
    latency_s: Sequence[float], ok: Sequence[bool], ttft_s: Sequence[float], tpot_s: Sequence[float]
) -> RequestSamples:
    """The store's compact per-request arrays (TTFT and TPOT one a successful streamed request)."""
    from array import array

    return RequestSamples(
        latency_s=array("f", latency_s),
        ok=bytearray(1 if flag else 0 for flag in ok),
        ttft_s=array("f", ttft_s),
        tpot_s=array("f", tpot_s),
    )


# Registration order is the order a file is tried in.
# isort: off
from lab.imports import guidellm  # noqa: E402,F401 - registers the tool
from lab.imports import vllm_bench  # noqa: E402,F401 - registers the tool
from lab.imports import aiperf  # noqa: E402,F401 - registers the tool

# isort: on
