"""Two reproductions, claim by claim: every verdict that differs, with both intervals, by how
much the two figures differ (a ratio, or percentage points between shares), whether the
intervals overlap, and whether the two machines differ in what the backends chose their
settings by (CPU, instruction sets, resolved settings), the difference attributed to them where
they do.

A reproduction is read from its published folder: the "Claim by claim" table of its README.md
(what a reader sees, so a report written by older code compares too) and its runs.csv (times,
commit, and the machine record of each run; reports from before the record have none and say
"not recorded", never a guess). ``python -m lab compare-reproductions`` is the command.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from lab.measurement.machine_record import (
    NOT_RECORDED,
    FeatureDifference,
    MachineRecord,
    feature_differences,
    settings_by_backend,
    settings_differences,
)

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
# A figure as a report prints it: "5.00x", "70.7%", "1,006.3x", "7.8 tok/s", with or without its interval.
_POINT = re.compile(r"^\s*(-?\d[\d,]*(?:\.\d+)?)\s*([^\s\[]*)")


@dataclass(frozen=True)
class ClaimRow:
    """One claim as a report states it: our figure as written and the verdict."""

    claim: str
    ours: str
    verdict: str
    # The "figure" column: what is measured ("vLLM over naive req/s, multi-turn chat").
    figure: str = ""

    def point(self) -> tuple[float, str] | None:
        """The figure before its interval and its unit ("5.00x [1.87x, 10.3x]": (5.0, "x")); None without one."""
        match = _POINT.match(self.ours)
        return (float(match.group(1).replace(",", "")), match.group(2)) if match else None

    def interval(self) -> tuple[float, float] | None:
        """The 95% interval written after the figure ("0.76x [0.63x, 0.92x]"); None without one."""
        if "[" not in self.ours:
            return None
        numbers = [float(n.replace(",", "")) for n in _NUMBER.findall(self.ours.split("[", 1)[1])]
        return (numbers[0], numbers[1]) if len(numbers) >= 2 else None


@dataclass(frozen=True)
class Reproduction:
    """A published reproduction: its claims, its runs' machine records, commits and times."""

    name: str
    claims: list[ClaimRow]
    machines: list[tuple[str, MachineRecord]] = field(default_factory=list)
    commits: tuple[str, ...] = ()
    started_at: str | None = None
    finished_at: str | None = None

    def records(self) -> list[MachineRecord]:
        return [machine for _, machine in self.machines]

    def span(self) -> str:
        """``2026-12-01 16:57-17:42 UTC`` from its runs' start and end (UTC, as stored)."""
        if not self.started_at or not self.finished_at:
            return "times not recorded"
        start, end = self.started_at[:16].replace("T", " "), self.finished_at[:16].replace("T", " ")
        return f"{start}-{end[11:] if end[:10] == start[:10] else end} UTC"


def claim_rows(readme: Path) -> list[ClaimRow]:
    """The rows of a report's "Claim by claim" table."""
    lines = readme.read_text(encoding="utf-8").splitlines()
    try:
        start = lines.index("## Claim by claim")
    except ValueError:
        raise ValueError(f"{readme}: no 'Claim by claim' section") from None
    header: list[str] | None = None
    rows: list[ClaimRow] = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        if header is None:
            header = cells
            continue
        row = dict(zip(header, cells, strict=False))
        rows.append(
            ClaimRow(claim=row["claim (seed)"], ours=row["ours"], verdict=row["verdict"], figure=row.get("figure", ""))
        )
    return rows


def _readme_commit(readme: Path) -> str | None:
    match = re.search(r"^\| lab git commit \| ([^|]+?) \|", readme.read_text(encoding="utf-8"), re.MULTILINE)
    return match.group(1) if match else None


def _readme_cpu(readme: Path) -> str | None:
    """The CPU row of a report's environment table, without its core count."""
    match = re.search(r"^\| CPU \| ([^|]+?)(?:, \d+ cores)? \|", readme.read_text(encoding="utf-8"), re.MULTILINE)
    return match.group(1) if match else None


def read_reproduction(folder: Path, name: str) -> Reproduction:
    """A report folder (or its README.md) with the runs.csv beside it, when there is one."""
    readme = folder / "README.md" if folder.is_dir() else folder
    runs_csv = readme.parent / "runs.csv"
    rows = list(csv.DictReader(runs_csv.open(encoding="utf-8"))) if runs_csv.is_file() else []
    commits = [row.get("lab_git_commit") or "" for row in rows]
    known = tuple(dict.fromkeys(c.removesuffix("-dirty")[:7] for c in commits if c))
    if not known and (commit := _readme_commit(readme)):
        known = (commit.removesuffix("-dirty")[:7],)
    starts = sorted(row["started_at"] for row in rows if row.get("started_at"))
    ends = sorted(row["finished_at"] for row in rows if row.get("finished_at"))
    machines = [(row.get("backend") or "", MachineRecord.from_record(row)) for row in rows]
    if not any(machine.cpu_model_name for _, machine in machines) and (cpu := _readme_cpu(readme)):
        # A report from before the machine record: its environment table names the CPU, nothing more.
        machines = [("", MachineRecord(cpu_model_name=cpu))]
    return Reproduction(
        name=name,
        claims=claim_rows(readme),
        machines=machines,
        commits=known,
        started_at=starts[0] if starts else None,
        finished_at=ends[-1] if ends else None,
    )


@dataclass(frozen=True)
class VerdictDifference:
    """A claim judged differently: both rows, whether the intervals overlap, and why."""

    claim: str
    first: ClaimRow
    second: ClaimRow
    overlap: str
    attribution: str
    change: str = ""


def figure_change(first: ClaimRow, second: ClaimRow) -> str:
    """By how much the second figure differs from the first: percentage points between two shares
    ("-5.5 points"), otherwise the second over the first ("1.95 times")."""
    a, b = first.point(), second.point()
    if a is None or b is None:
        return "no figure on " + ("either side" if a is None and b is None else "one side")
    if a[1] != b[1]:
        return f"not comparable ({a[1] or 'no unit'} against {b[1] or 'no unit'})"
    if a[1] == "%":
        return f"{b[0] - a[0]:+.1f} points"
    if a[0] == b[0]:
        return "the same figure"
    if a[0] == 0:
        return "from zero"
    times = b[0] / a[0]
    return f"{times:,.0f} times" if times >= 100 else f"{times:#.3g} times"


def intervals_overlap(first: ClaimRow, second: ClaimRow) -> str:
    """ "yes", "no" or why it cannot be told (a side without an interval)."""
    a, b = first.interval(), second.interval()
    if a is None or b is None:
        return "no interval on " + ("either side" if a is None and b is None else "one side")
    return "yes" if a[0] <= b[1] and b[0] <= a[1] else "no"


@dataclass(frozen=True)
class Comparison:
    """Two reproductions: the verdicts that differ and the machine differences behind them."""

    first: Reproduction
    second: Reproduction
    differences: list[VerdictDifference]
    hardware: list[FeatureDifference]
    settings: list[FeatureDifference]

    @property
    def names(self) -> tuple[str, str]:
        return (self.first.name, self.second.name)

    def unrecorded(self) -> list[str]:
        return [
            side.name
            for side in (self.first, self.second)
            if not any(m.instruction_sets_recorded for m in side.records())
        ]


def _attribution(overlap: str, named: str, unrecorded: list[str]) -> str:
    missing = f" ({' and '.join(unrecorded)}: instruction sets not recorded)" if unrecorded else ""
    if not named:
        if unrecorded:
            return f"cannot tell: the hardware of {' and '.join(unrecorded)} was not recorded"
        return "not the recorded hardware (the machines match in every recorded feature): load, noise or code"
    if overlap == "no":
        return (
            f"the figures differ beyond both intervals, and the machines differ in: {named}; "
            f"attributed to these{missing}"
        )
    if overlap == "yes":
        return (
            f"the intervals overlap (the verdict moved within the noise); the machines also differ in: {named}{missing}"
        )
    return f"{overlap}, so the noise is not known; the machines differ in: {named}{missing}"


def compare(first: Reproduction, second: Reproduction) -> Comparison:
    """Every claim whose verdict differs between the two, and how their machines differ."""
    hardware = [
        d for d in feature_differences(first.records(), second.records()) if NOT_RECORDED not in (d.first, d.second)
    ]
    settings = [
        d
        for d in settings_differences(settings_by_backend(first.machines), settings_by_backend(second.machines))
        if NOT_RECORDED not in (d.first, d.second)
    ]
    unrecorded = [side.name for side in (first, second) if not any(m.instruction_sets_recorded for m in side.records())]
    named = "; ".join(f"{d.feature} {d.first} against {d.second}" for d in (*hardware, *settings))
    by_claim = {row.claim: row for row in second.claims}
    differences = []
    for row in first.claims:
        other = by_claim.get(row.claim)
        if other is None or other.verdict == row.verdict:
            continue
        overlap = intervals_overlap(row, other)
        attribution = _attribution(overlap, named, unrecorded)
        differences.append(VerdictDifference(row.claim, row, other, overlap, attribution, figure_change(row, other)))
    return Comparison(first, second, differences, hardware, settings)


def _machine_lines(comparison: Comparison) -> list[str]:
    names = comparison.names
    lines = []
    if comparison.hardware:
        lines.append("Machines: they differ in " + "; ".join(d.text(names) for d in comparison.hardware) + ".")
    if comparison.unrecorded():
        lines.append(
            f"The instruction sets of {' and '.join(comparison.unrecorded())} were not recorded (runs.csv has no "
            "machine record for runs taken before the lab kept one), so whether the machines differ in them is "
            "not known."
        )
    if not lines:
        lines = ["Machines: the same in every recorded CPU feature (model, family, AVX2, AVX-512, AVX-512 BF16, AMX)."]
    if comparison.settings:
        lines.append("Resolved settings differ: " + "; ".join(d.text(names) for d in comparison.settings) + ".")
    return lines


def comparison_markdown(comparison: Comparison) -> str:
    """The comparison as Markdown: machines, then every differing verdict in a table."""
    first, second = comparison.first, comparison.second
    lines = [
        f"- {side.name}: commit {', '.join(side.commits) or 'not recorded'}, {side.span()}" for side in (first, second)
    ]
    lines += ["", *_machine_lines(comparison), ""]
    count = len(comparison.differences)
    lines.append(f"Verdicts that differ: {count} of {len(first.claims)} claims.")
    if comparison.differences:
        a, b = comparison.names
        lines += [
            "",
            f"| claim | {a}: ours | {a} | {b}: ours | {b} | by how much ({b} against {a}) | intervals overlap "
            "| attributed to |",
            "|---|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {d.claim} | {d.first.ours} | {d.first.verdict} | {d.second.ours} | {d.second.verdict} | "
            f"{d.change} | {d.overlap} | {d.attribution} |"
            for d in comparison.differences
        ]
    return "\n".join(lines)
