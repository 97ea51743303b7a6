"""The reproduction report (see :mod:`lab.report.build`)."""

from lab.report.build import (  # noqa: F401
    HELD,
    NOT_HELD,
    NOT_MEASURED,
    PARTLY,
    PRESETS,
    REPORT_COMMAND,
    VERDICT_RULES,
    enqueue_reproduction,
    evaluate_claims,
    judge,
    latest_reproduction,
    report_from_experiments,
    reproduce,
    seed_table,
    write_report,
)
