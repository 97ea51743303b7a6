"""The workload registry: one module per workload, looked up by name.

A workload declares (see :class:`Workload`): its option section in the spec (if any), the
options a person sets (:class:`~lab.user_input.fields.OptionField`: the New experiment form
shows them, the CLI's ``--set`` help names them), a check of the spec's workload fields,
the request file it prepares for k6 (if any), its warm-up messages, the ``-e`` settings
and the k6 script it runs. The runner, the k6 driver and the form look workloads up here;
nothing else names one.

Workloads read the spec through the small protocols below (:class:`RunSettings`,
:class:`WorkloadSettings`), not through ``lab.specs.schema``, which imports this registry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pydantic import BaseModel

from lab.user_input.fields import OptionField, declared_fields

if TYPE_CHECKING:
    from lab.backends import Backend

K6_DIR = Path(__file__).resolve().parent.parent.parent / "k6"

Messages = list[dict[str, str]]


class UnknownWorkloadError(ValueError):
    """A workload name no module registered."""


class WorkloadError(RuntimeError):
    """The workload cannot be prepared (the message says why, for the user)."""


class WorkloadSettings(Protocol):
    """The spec's ``workload`` part as a workload reads it (``lab.specs.schema.WorkloadSpec``)."""

    kind: str
    prompts: int
    sessions: int
    max_turns: int
    max_session_chars: int
    system_prompt: str | None
    dataset_path: str | None
    requests_path: str | None

    def options(self, kind: str | None = None) -> Any: ...


class LoadSettings(Protocol):
    """The spec's ``load`` part as a workload reads it (``lab.specs.schema.LoadSpec``)."""

    max_vus: int

    @property
    def planned_duration_s(self) -> float: ...


class CacheSettings(Protocol):
    """The spec's ``cache`` part as a workload reads it (``lab.specs.cache_spec.CacheSpec``)."""

    @property
    def tier(self) -> str: ...

    @property
    def similarity(self) -> float: ...

    @property
    def embedding_model(self) -> str: ...


class RunSettings(Protocol):
    """A run spec as a workload reads it (``lab.specs.schema.RunSpec``)."""

    model: str
    max_tokens: int
    warmup_requests: int
    random_seed: int

    @property
    def workload(self) -> WorkloadSettings: ...

    @property
    def load(self) -> LoadSettings: ...

    @property
    def cache(self) -> CacheSettings: ...

    @property
    def uses_cache(self) -> bool: ...

    def backend_options(self) -> Any: ...


def option_value(workload: WorkloadSettings, option: OptionField) -> Any:
    """The value of a declared option in the spec's workload part (None when unset)."""
    holder = workload.options() if option.section else workload
    return getattr(holder, option.name, None) if holder is not None else None


def check_named_files(workload_kind: Workload, workload: WorkloadSettings) -> None:
    """Raise ValueError when a file the spec names (an option with an upload kind: a request
    file, a dataset) exists but is not a regular file under the size limit."""
    from lab.workloads.input_files import check_input_path

    for option in workload_kind.form_fields():
        value = option_value(workload, option) if option.upload else None
        if value:
            check_input_path(str(value))


class Workload:
    """One workload. Subclass, set the class attributes, register."""

    name: ClassVar[str]
    label: ClassVar[str] = ""
    script: ClassVar[str]  # file name under k6/
    # The spec's ``workload.<section>`` and its model; None: the workload uses the flat fields.
    section: ClassVar[str | None] = None
    options_model: ClassVar[type[BaseModel] | None] = None
    # What a person sets (the form's fields, the --set help); () with an options model:
    # every field of the model, labelled by its description.
    option_fields: ClassVar[tuple[OptionField, ...]] = ()

    def form_fields(self) -> tuple[OptionField, ...]:
        """The options the form shows and ``--set`` names for this workload."""
        return declared_fields(self.option_fields, self.options_model, self.section)

    def check(self, workload: WorkloadSettings) -> None:
        """Raise ValueError when the spec's workload fields cannot work (a missing file...).
        By default: every required option is set."""
        for option in self.form_fields():
            if option.required and option_value(workload, option) in (None, ""):
                raise ValueError(f"the {self.name} workload needs {option.label} ({option.path})")
        check_named_files(self, workload)

    def prompts_column(self, spec: RunSettings) -> int | None:
        """The run's ``prompts`` column, which tables group by: the spec's flat ``prompts``
        where the workload sends that many distinct prompts; None otherwise."""
        return None

    def prepare(self, spec: RunSettings, run_dir: Path, backend: Backend) -> Path | None:
        """Write the request file k6 replays into ``run_dir``; None when the script needs none."""
        return None

    def warmup_messages(self, spec: RunSettings, requests_file: Path | None) -> list[Messages]:
        """The messages of the warm-up requests: by default the request file's first turns."""
        if requests_file is None:
            return []
        sessions = json.loads(requests_file.read_text())
        turns = [turn if isinstance(turn, list) else turn["messages"] for session in sessions for turn in session]
        return [turns[i % len(turns)] for i in range(spec.warmup_requests)] if turns else []

    def k6_env(self, spec: RunSettings) -> dict[str, str]:
        """Settings of this workload's k6 script beyond the common ones (see k6/lib.js)."""
        return {}

    def preview_lines(self, spec: RunSettings) -> list[str]:
        """What the form shows of the spec's workload before a launch (a trace's summary); none by default."""
        return []

    def distinct_requests(self, spec: RunSettings) -> int | None:
        """How many different requests the script can send (None: not a fixed, known set)."""
        return None

    def block_tokens(self, spec: RunSettings) -> int | None:
        """The prompt block size a recorded trace of this workload's traffic should use (None: the
        recorder's default)."""
        return None

    @property
    def script_path(self) -> Path:
        return K6_DIR / self.script


WORKLOADS: dict[str, Workload] = {}


def register(cls: type[Workload]) -> type[Workload]:
    """Class decorator: add a workload to the registry (its name must be new)."""
    if not cls.name or cls.name in WORKLOADS:
        raise ValueError(f"cannot register workload {cls.name!r}: empty or taken")
    WORKLOADS[cls.name] = cls()
    return cls


def unregister(name: str) -> None:
    """Remove a workload (tests that register a throwaway one clean up with this)."""
    WORKLOADS.pop(name, None)


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UnknownWorkloadError(f"unknown workload {name!r}; workloads: {', '.join(WORKLOADS)}") from None


def workload_names() -> list[str]:
    return list(WORKLOADS)


def options_sections() -> dict[str, type[BaseModel]]:
    """``{section: options model}`` of the workloads that have one."""
    return {w.section: w.options_model for w in WORKLOADS.values() if w.section and w.options_model is not None}


def write_sessions(sessions: list[Any], path: Path) -> Path:
    if not sessions:
        raise WorkloadError("the workload has no usable sessions: check the dataset and the turn/size limits")
    from lab.workloads import datasets

    return datasets.write_requests_file(sessions, path)


# isort: off
# Registration order is the order the form and the CLI list the kinds in.
from lab.workloads import number_story, sharegpt_chat, custom, synthetic, trace, paraphrases  # noqa: E402, F401 - registers the kinds
# isort: on
