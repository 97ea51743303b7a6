"""The reproduction report (see :mod:`lab.report.build` and :mod:`lab.report.reproduction`): its public entry points."""

from lab.report.build import PRESETS, QUICK_REPORT_DIR, REPORT_COMMAND, REPORT_DIR, write_report
from lab.report.reproduction import (
    DirtyTreeError,
    enqueue_reproduction,
    latest_reproduction,
    report_from_experiments,
    report_only,
    reproduce,
)

__all__ = [
    "PRESETS",
    "QUICK_REPORT_DIR",
    "REPORT_COMMAND",
    "REPORT_DIR",
    "DirtyTreeError",
    "enqueue_reproduction",
    "latest_reproduction",
    "report_from_experiments",
    "report_only",
    "reproduce",
    "write_report",
]
