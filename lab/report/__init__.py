"""The reproduction report (see :mod:`lab.report.build`): its public entry points."""

from lab.report.build import (
    PRESETS,
    REPORT_COMMAND,
    enqueue_reproduction,
    latest_reproduction,
    report_from_experiments,
    reproduce,
    write_report,
)

__all__ = [
    "PRESETS", "REPORT_COMMAND", "enqueue_reproduction", "latest_reproduction", "report_from_experiments",
    "reproduce", "write_report",
]
