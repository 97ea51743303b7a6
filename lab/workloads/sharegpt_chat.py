"""ShareGPT chat replay: multi-turn sessions from the ShareGPT file (the package's or an upload)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from lab.user_input.fields import OptionField
from lab.workloads import RunSettings, Workload, datasets, register, sharegpt_reader, write_sessions

if TYPE_CHECKING:
    from lab.backends import Backend


@lru_cache(maxsize=4)
def conversations(path: str) -> tuple[datasets.Conversation, ...]:
    # Reading the 125 MB ShareGPT file takes ~1-2 s; keep it for the worker's lifetime.
    return tuple(sharegpt_reader.iter_sharegpt_conversations(path))


@register
class SharegptChat(Workload):
    name = "sharegpt-chat"
    label = "ShareGPT chat replay"
    script = "chat_replay.js"
    option_fields = (
        # The form starts smaller than the spec's 1,000 sessions: a first try on a small machine.
        OptionField("sessions", "Sessions to replay", step=1, default=100),
        OptionField("dataset_path", "ShareGPT file", upload="sharegpt", none_label="the bundled ShareGPT file"),
    )

    def prepare(self, spec: RunSettings, run_dir: Path, backend: Backend) -> Path:
        workload = spec.workload
        source = workload.dataset_path or str(sharegpt_reader.default_sharegpt_path())
        sessions = datasets.build_chat_sessions(
            conversations(source),
            sessions=workload.sessions,
            max_turns=workload.max_turns,
            system_prompt=workload.system_prompt,
            random_seed=spec.random_seed,
            max_session_chars=workload.max_session_chars,
        )
        return write_sessions(sessions, run_dir / "requests.json")
