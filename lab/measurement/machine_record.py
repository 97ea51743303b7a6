"""The hardware a run's backends chose their settings by, and what "best" became.

Two machines sold under one name ("AMD EPYC, 2 cores") can differ in what decides a verdict:
vLLM-CPU's "best" dtype is bfloat16 only where the CPU computes it natively (AVX-512 BF16
or AMX), and bfloat16 against float32 moved vLLM's 1-VU throughput 3.4x between two such
machines. Every run therefore records (:class:`MachineRecord`, one column each on the run):

- the CPU's model name and family (vendor, family and model numbers) from ``/proc/cpuinfo``;
- the instruction sets the engines use: AVX2, AVX-512 (foundation), AVX-512 BF16, AMX;
- the backend's resolved settings (dtype, threads, binding, block size: each backend
  declares which of its launch arguments they are, ``lab.backends.Backend.settings_from_launch``);
- a fixed-kernel speed comparable across machines (:mod:`lab.measurement.reference_kernel`),
  apart from the within-run machine-speed index (:mod:`lab.measurement.machine_speed`), which
  is relative to one experiment's median and says nothing across machines.

Every reader takes ``/proc/cpuinfo``'s path as an argument, so a test fakes a CPU with a file.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# LAB_CPUINFO names another file to read (a test fakes a second machine's CPU with it).
CPUINFO = Path(os.environ.get("LAB_CPUINFO") or "/proc/cpuinfo")

# Column -> (the name people read, the /proc/cpuinfo flags any one of which means "has it").
INSTRUCTION_SETS: dict[str, tuple[str, tuple[str, ...]]] = {
    "cpu_avx2": ("AVX2", ("avx2",)),
    "cpu_avx512": ("AVX-512", ("avx512f",)),
    "cpu_avx512_bf16": ("AVX-512 BF16", ("avx512_bf16",)),
    "cpu_amx": ("AMX", ("amx_tile", "amx_bf16", "amx_int8")),
}
NOT_RECORDED = "not recorded"


def _cpuinfo_fields(text: str) -> dict[str, str]:
    """The first processor's ``key: value`` lines (every core of a machine reads the same)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


@dataclass(frozen=True)
class CpuFeatures:
    """What ``/proc/cpuinfo`` says about the CPU; None where it could not be read."""

    model_name: str | None = None
    family: str | None = None
    flags: frozenset[str] | None = None

    def has(self, column: str) -> bool | None:
        """Whether the CPU has the instruction set of ``column`` (None: not known)."""
        if self.flags is None:
            return None
        return any(flag in self.flags for flag in INSTRUCTION_SETS[column][1])


def read_cpu_features(path: Path = CPUINFO) -> CpuFeatures:
    """The CPU's model name, family (``AuthenticAMD family 25 model 1``) and flags from ``path``."""
    try:
        fields = _cpuinfo_fields(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return CpuFeatures()
    vendor, family, model = fields.get("vendor_id"), fields.get("cpu family"), fields.get("model")
    family_text = " ".join(
        part for part in (vendor, f"family {family}" if family else "", f"model {model}" if model else "") if part
    )
    # x86 calls them flags; ARM "Features".
    flags = fields.get("flags", fields.get("Features"))
    return CpuFeatures(
        model_name=fields.get("model name") or None,
        family=family_text or None,
        flags=frozenset(flags.split()) if flags is not None else None,
    )


def settings_text(settings: Mapping[str, str]) -> str | None:
    """A backend's resolved settings as stored: ``dtype=float32, block_size=32``; None without any."""
    return ", ".join(f"{name}={value}" for name, value in settings.items()) or None


def parse_settings(text: str | None) -> dict[str, str]:
    """:func:`settings_text` read back."""
    pairs = (item.partition("=") for item in (text or "").split(", ") if "=" in item)
    return {name.strip(): value.strip() for name, _, value in pairs}


def _as_bool(value: Any) -> bool | None:
    """A stored flag, from the store (bool) or a CSV cell ("True", "yes", "1", "" for unknown)."""
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "1", "1.0"):
        return True
    if text in ("false", "no", "0", "0.0"):
        return False
    return None


def _as_float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number  # NaN: an empty CSV cell


def _as_text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and value != value):
        return None
    return str(value).strip() or None


@dataclass(frozen=True, kw_only=True)
class MachineRecord:
    """What a run's backend chose its settings by, one run column each; None: not recorded."""

    cpu_model_name: str | None = None
    cpu_family: str | None = None
    cpu_avx2: bool | None = None
    cpu_avx512: bool | None = None
    cpu_avx512_bf16: bool | None = None
    cpu_amx: bool | None = None
    # GFLOP/s of the fixed single-threaded float32 kernel (lab.measurement.reference_kernel).
    reference_kernel_gflops: float | None = None
    # The backend's resolved settings, settings_text's form ("dtype=float32, threads_bind=auto").
    backend_settings: str | None = None

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The record's fields: the run's columns of the same names, in order."""
        return tuple(item.name for item in dataclasses.fields(cls))

    @classmethod
    def capture(
        cls, *, features: CpuFeatures, reference_kernel_gflops: float | None, backend_settings: Mapping[str, str]
    ) -> MachineRecord:
        """The record of a run about to be measured."""
        return cls(
            cpu_model_name=features.model_name,
            cpu_family=features.family,
            **{column: features.has(column) for column in INSTRUCTION_SETS},
            reference_kernel_gflops=reference_kernel_gflops,
            backend_settings=settings_text(backend_settings),
        )

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> MachineRecord:
        """The record of a run row, a run record or a runs.csv row (missing columns: not recorded)."""
        return cls(
            cpu_model_name=_as_text(record.get("cpu_model_name")),
            cpu_family=_as_text(record.get("cpu_family")),
            **{column: _as_bool(record.get(column)) for column in INSTRUCTION_SETS},
            reference_kernel_gflops=_as_float(record.get("reference_kernel_gflops")),
            backend_settings=_as_text(record.get("backend_settings")),
        )

    @classmethod
    def from_columns(cls, row: object) -> MachineRecord:
        """The record stored on a run row (anything with the columns as attributes)."""
        return cls.from_record({name: getattr(row, name, None) for name in cls.names()})

    def columns(self) -> dict[str, Any]:
        """Every field as a run column."""
        return {name: getattr(self, name) for name in self.names()}

    @property
    def recorded(self) -> bool:
        """Whether anything about the CPU was recorded (runs from before the record have nothing)."""
        return any(getattr(self, column) is not None for column in ("cpu_model_name", *INSTRUCTION_SETS))

    @property
    def instruction_sets_recorded(self) -> bool:
        return any(getattr(self, column) is not None for column in INSTRUCTION_SETS)

    def instruction_sets_text(self) -> str:
        """``AVX2 yes, AVX-512 no, AVX-512 BF16 no, AMX no`` (``not recorded`` for an old run)."""
        if all(getattr(self, column) is None for column in INSTRUCTION_SETS):
            return NOT_RECORDED
        return ", ".join(f"{label} {_yes_no(getattr(self, column))}" for column, (label, _) in INSTRUCTION_SETS.items())

    def settings(self) -> dict[str, str]:
        """The backend's resolved settings by name."""
        return parse_settings(self.backend_settings)


def _yes_no(value: bool | None) -> str:
    return NOT_RECORDED if value is None else ("yes" if value else "no")


def has_native_bf16(record: MachineRecord) -> bool | None:
    """Whether the CPU computes bfloat16 natively (AVX-512 BF16 or AMX); None: not recorded."""
    values = (record.cpu_avx512_bf16, record.cpu_amx)
    if any(values):
        return True
    return None if None in values else False


@dataclass(frozen=True)
class FeatureDifference:
    """One machine feature that differs between two sets of runs (values as people read them)."""

    feature: str
    first: str
    second: str

    def text(self, names: tuple[str, str]) -> str:
        return f"{self.feature}: {self.first} ({names[0]}) against {self.second} ({names[1]})"


def _feature_values(records: list[MachineRecord]) -> dict[str, str]:
    """Each item-1 feature of a set of runs, joined when its runs differ; "not recorded" if none has it."""

    def joined(values: list[str | None]) -> str:
        known = sorted({value for value in values if value is not None})
        return " / ".join(known) if known else NOT_RECORDED

    features = {
        "CPU": joined([r.cpu_model_name for r in records]),
        "CPU family": joined([r.cpu_family for r in records]),
    }
    for column, (label, _) in INSTRUCTION_SETS.items():
        features[label] = joined([None if getattr(r, column) is None else _yes_no(getattr(r, column)) for r in records])
    return features


def feature_differences(first: list[MachineRecord], second: list[MachineRecord]) -> list[FeatureDifference]:
    """The CPU features (model, family, instruction sets) in which two sets of runs differ; a
    feature not recorded on either side is a difference too ("not recorded" cannot be equal)."""
    ours, theirs = _feature_values(first), _feature_values(second)
    return [
        FeatureDifference(feature, ours[feature], theirs[feature])
        for feature in ours
        if ours[feature] != theirs[feature] or NOT_RECORDED in (ours[feature], theirs[feature])
    ]


def settings_by_backend(backend_records: list[tuple[str, MachineRecord]]) -> dict[str, str]:
    """Each backend's resolved settings over its runs (``backend: settings``), distinct values joined."""
    found: dict[str, list[str]] = {}
    for backend, record in backend_records:
        if record.backend_settings:
            values = found.setdefault(backend, [])
            if record.backend_settings not in values:
                values.append(record.backend_settings)
    return {backend: " / ".join(values) for backend, values in found.items()}


def settings_differences(first: dict[str, str], second: dict[str, str]) -> list[FeatureDifference]:
    """Backends whose resolved settings differ between two sets of runs (``settings_by_backend``'s)."""
    return [
        FeatureDifference(f"{backend} settings", first.get(backend, NOT_RECORDED), second.get(backend, NOT_RECORDED))
        for backend in sorted(set(first) | set(second))
        if first.get(backend) != second.get(backend)
    ]
