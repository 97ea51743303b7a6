"""The reproduction report (see :mod:`lab.report.build`): its public entry points."""

from lab.report.build import (
    PRESETS,
    QUICK_REPORT_DIR,
    REPORT_COMMAND,
    REPORT_DIR,
    DirtyTreeError,
    enqueue_reproduction,
    latest_reproduction,
    report_from_experiments,
    report_only,
    reproduce,
    write_report,
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
