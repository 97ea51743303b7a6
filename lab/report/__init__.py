"""The reproduction report (see :mod:`lab.report.build` and :mod:`lab.report.reproduction`): its public entry points."""

from lab.report.build import PRESETS, QUICK_REPORT_DIR, REPORT_COMMAND, REPORT_DIR, write_report
from lab.report.reproduction import latest_reproduction, report_from_experiments, report_only

__all__ = [
    "PRESETS",
    "QUICK_REPORT_DIR",
    "REPORT_COMMAND",
    "REPORT_DIR",
    "latest_reproduction",
    "report_from_experiments",
    "report_only",
    "write_report",
]
