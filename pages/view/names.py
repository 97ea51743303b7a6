"""One display-name map: the human name, unit and rounding of every figure the pages show.

Tables, chart legends and axes, and the CSV option for human headers all take their
names from here, so ``output_tok_per_s`` reads "output tok/s" everywhere. A run's figures come
from their one declaration (``db.figures``); the other names (identity, set-up, series) are here. A table shown
to a person goes through :func:`display_frame`: human headers, numbers rounded, "–" for
missing, timestamps in local time without microseconds. CSV downloads keep machine names
and full precision unless the user asks for human headers (:func:`human_headers`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from db.figures import FIGURES
from lab.specs.configuration import model_name

MISSING = "–"


@dataclass(frozen=True)
class DisplayName:
    """How one figure is shown: ``label`` (unit included when it has one), decimals, and a
    scale (0.5 -> 50 % for shares)."""

    label: str
    unit: str = ""
    decimals: int | None = None  # None: text or a whole number
    scale: float = 1.0
    thousands: bool = True  # False for identifiers (run 1234, PID 56789)

    @property
    def header(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label


def _seconds(label: str) -> DisplayName:
    return DisplayName(label, "s", 3)


def _share(label: str) -> DisplayName:
    return DisplayName(label, "%", 1, 100.0)


DISPLAY_NAMES: dict[str, DisplayName] = {
    # identity and set-up
    "run_id": DisplayName("run", thousands=False),
    "run": DisplayName("run", thousands=False),
    "experiment_id": DisplayName("experiment #", thousands=False),
    "experiment": DisplayName("experiment"),
    "experiments": DisplayName("experiments"),
    "preset": DisplayName("preset"),
    "cell_label": DisplayName("cell"),
    "repeat_index": DisplayName("repeat"),
    "status": DisplayName("status"),
    "status_reason": DisplayName("reason"),
    "backend": DisplayName("backend"),
    "model": DisplayName("model"),
    "workload": DisplayName("workload"),
    "load_kind": DisplayName("load"),
    "vus": DisplayName("VUs"),
    "arrival_rate_per_s": DisplayName("arrival rate", "req/s", 2),
    "prompts": DisplayName("PROMPTS"),
    "duration_s": DisplayName("duration", "s", 0),
    "max_tokens": DisplayName("max tokens"),
    "random_seed": DisplayName("seed", thousands=False),
    "tags": DisplayName("tags"),
    "launched_by": DisplayName("launched by"),
    "source": DisplayName("measured by"),
    "created_at": DisplayName("created"),
    "started_at": DisplayName("started"),
    "finished_at": DisplayName("finished"),
    "worker_name": DisplayName("worker"),
    "hardware": DisplayName("hardware"),
    # provenance and the machine record (lab.measurement.machine_record)
    "lab_git_commit": DisplayName("lab commit"),
    "lab_git_dirty": DisplayName("uncommitted changes"),
    "rules_version": DisplayName("rules version", thousands=False),
    "cpu_model_name": DisplayName("CPU"),
    "cpu_family": DisplayName("CPU family"),
    "cpu_avx2": DisplayName("AVX2"),
    "cpu_avx512": DisplayName("AVX-512"),
    "cpu_avx512_bf16": DisplayName("AVX-512 BF16"),
    "cpu_amx": DisplayName("AMX"),
    "reference_kernel_gflops": DisplayName("fixed-kernel speed", "GFLOP/s", 1),
    "backend_settings": DisplayName("resolved settings"),
    "n": DisplayName("runs"),
    # every figure of a run, from its one declaration (db.figures)
    **{
        item.name: DisplayName(item.label, item.header_unit, item.display_decimals, item.display_scale)
        for item in FIGURES
    },
    # per-second series (charts)
    "time_s": DisplayName("time since the load started", "s", 0),
    "running_requests": DisplayName("running in the backend"),
    "waiting_requests": DisplayName("waiting in the backend"),
    "other_cpu_percent": DisplayName("other processes", "% of a core", 1),
    "requests_in_flight": DisplayName("requests in flight"),
    # services, workers, server metrics, ratios, cost
    "service": DisplayName("service"),
    "kind": DisplayName("kind"),
    "state": DisplayName("state"),
    "url": DisplayName("URL"),
    "pid": DisplayName("PID", thousands=False),
    "uptime": DisplayName("uptime"),
    "metric": DisplayName("metric"),
    "wire_name": DisplayName("name on /metrics"),
    "before": DisplayName("before", "", 3),
    "after": DisplayName("after", "", 3),
    "change": DisplayName("change", "", 3),
    "ratio": DisplayName("ratio"),
    "value": DisplayName("value", "", 2),
    "ratio_interval": DisplayName("95% interval"),
    "ratio_ci95_low": DisplayName("ratio, 95% interval low", "", 2),
    "ratio_ci95_high": DisplayName("ratio, 95% interval high", "", 2),
    "interval_method": DisplayName("how the interval was computed"),
    "figure": DisplayName("figure"),
    "cell": DisplayName("cells compared"),
    "significance": DisplayName("significance"),
    "cost_per_million_output_tokens": DisplayName("cost per 1M output tokens", "", 2),
    "name": DisplayName("worker"),
    "labels": DisplayName("labels"),
    "heartbeat_age_s": DisplayName("heartbeat age", "s", 1),
    "current_run": DisplayName("current run", thousands=False),
    "services": DisplayName("services on its machine"),
    "machine_speed_index": DisplayName("machine speed index", "", 2),
    "setting": DisplayName("setting"),
    "what_changes": DisplayName("what changes"),
    "differ_in": DisplayName("settings that differ"),
    "first": DisplayName("first cell"),
    "second": DisplayName("second cell"),
    "reason": DisplayName("why no ratio"),
}

# Per-process series named after the process (``naive_cpu_percent``, ``vllm_rss_mb``).
_PER_PROCESS = (
    (
        re.compile(r"^(?P<who>.+)_ci95_(?P<end>low|high)$"),
        lambda who, end="": DisplayName(
            f"{display_name(who).label}, 95% interval {end}",
            display_name(who).unit,
            display_name(who).decimals,
            display_name(who).scale,
        ),
    ),
    (re.compile(r"^(?P<who>.+)_cpu_percent$"), lambda who: DisplayName(f"{who} CPU", "% of a core", 1)),
    (re.compile(r"^(?P<who>.+)_rss_mb$"), lambda who: DisplayName(f"{who} memory", "MiB", 0)),
    (
        re.compile(r"^(?P<who>.+)_sd$"),
        lambda who: DisplayName(
            f"± sd of {display_name(who).label}",
            display_name(who).unit,
            display_name(who).decimals,
            display_name(who).scale,
        ),
    ),
)


def display_name(name: str) -> DisplayName:
    """The display entry of a machine name; unknown names read with spaces for underscores."""
    if name in DISPLAY_NAMES:
        return DISPLAY_NAMES[name]
    for pattern, build in _PER_PROCESS:
        match = pattern.match(name)
        if match:
            return build(**match.groupdict())
    return DisplayName(name.replace("_", " "))


def header(name: str) -> str:
    """The column header, legend or axis title of a machine name, unit included."""
    return display_name(name).header


def is_missing(value: Any) -> bool:
    if value is None or value is pd.NaT:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def local_time(value: Any) -> str:
    """An ISO timestamp or datetime as local ``YYYY-MM-DD HH:MM:SS``; "–" when missing."""
    if is_missing(value) or value == "":
        return MISSING
    try:
        moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # the database stores UTC
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def format_value(name: str, value: Any) -> str:
    """One cell for display: rounded as the name says, "–" when missing, local time for ``*_at``."""
    if name.endswith("_at"):
        return local_time(value)
    if is_missing(value):
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if name == "model":  # by name: a run stores its local model folder's absolute path
        return model_name(str(value))
    if isinstance(value, (int, float)):
        entry = display_name(name)
        number = float(value) * entry.scale
        if math.isinf(number):
            return "∞"
        decimals = entry.decimals
        if decimals is None:
            decimals = 0 if float(number).is_integer() else 2
        return f"{number:,.{decimals}f}" if entry.thousands else f"{number:.{decimals}f}"
    return str(value)


def display_frame(frame: pd.DataFrame, *, keep_headers: tuple[str, ...] = ()) -> pd.DataFrame:
    """``frame`` as shown to a person: human headers, every cell a rounded display string."""
    shown = pd.DataFrame(
        {
            (name if name in keep_headers else header(name)): [format_value(name, value) for value in frame[name]]
            for name in frame.columns
        },
        index=frame.index,
    )
    return shown.reset_index(drop=True)


def human_headers(frame: pd.DataFrame) -> pd.DataFrame:
    """The same values (full precision) under human headers, for a CSV a person reads."""
    return frame.rename(columns={name: header(name) for name in frame.columns})


# Settings of a stored run spec (dotted paths) as people call them; others read as their words.
SETTING_NAMES: dict[str, str] = {
    "backend": "backend",
    "model": "model",
    "target_url": "target URL",
    "served_model_name": "served model name",
    "max_tokens": "max tokens",
    "temperature": "temperature",
    "top_p": "top p",
    "warmup_requests": "warm-up requests",
    "keep_caches_warm": "keep caches warm",
    "requires": "worker labels needed",
    "worker": "pinned worker",
    "load.kind": "load",
    "load.vus": "VUs",
    "load.duration_s": "duration (s)",
    "load.rate_per_s": "arrival rate (req/s)",
    "load.max_vus": "VU cap",
    "load.graceful_stop_s": "graceful stop (s)",
    "load.stages": "VU stages",
    "workload.kind": "workload",
    "workload.prompts": "PROMPTS",
    "workload.sessions": "sessions",
    "workload.max_turns": "turns per session",
    "workload.stream": "streamed answers",
    "workload.system_prompt": "system prompt",
    "workload.dataset_path": "dataset",
    "workload.requests_path": "requests file",
    "source.tool": "measured by (tool)",
    "source.version": "tool version",
    "cache.policy": "cache policy",
    "cache.ttl_s": "cache TTL (s)",
    "cache.fill_first_up_to": "cache filled first (requests)",
}


def setting_label(path: str) -> str:
    """A run spec setting (``load.vus``, ``vllm.max_model_len``) in words: "VUs", "vllm: max model len"."""
    if path in SETTING_NAMES:
        return SETTING_NAMES[path]
    *section, last = path.split(".")
    words = f"{last.removesuffix('_s').replace('_', ' ')} (s)" if last.endswith("_s") else last.replace("_", " ")
    return f"{' '.join(section)}: {words}" if section else words


def setting_value(value: Any, name: str | None = None) -> str:
    """A setting's value as shown: "–" when unset, yes/no, lists joined, the ``model`` setting by
    the model's name (a run stores a local folder's absolute path)."""
    if name == "model" and isinstance(value, str):
        return model_name(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(setting_value(item) for item in value) or MISSING
    if is_missing(value):
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return f"{value:.0f}"
    return str(value)


def csv_frame(frame: pd.DataFrame, *, human: bool) -> pd.DataFrame:
    """A table for a CSV download: full precision, missing values as empty cells (never ``nan``),
    machine names or, with ``human``, the display headers."""
    clean = frame.astype(object).where(frame.notna(), None)
    return human_headers(clean) if human else clean
