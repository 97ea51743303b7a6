"""The proxy's side of trace recording (``--record-trace``): the recorder its settings ask for,
and the answer a client got, caught on its way out (:class:`CapturedAnswer`).

The recorder itself, and everything it costs beyond a ticket and a ``deque.append`` a
request, runs in batches every 0.1 s on the proxy's event loop (:mod:`services.traces.recorder`).
"""

from __future__ import annotations

from pathlib import Path

from services.cache_proxy.config import ProxyConfig
from services.cache_proxy.responses import Message, Send
from services.traces.blocks import ByteTokens, ChatTemplateTokens, PromptTokens
from services.traces.lines import TraceLines
from services.traces.recorder import TraceRecorder

BYTES_PER_MB = 1024 * 1024


def recorder_for(config: ProxyConfig) -> TraceRecorder | None:
    """The recorder ``config`` asks for (not started; its tokenizer loaded), None when it records nothing."""
    if config.record_trace is None:
        return None
    tokens: PromptTokens = (
        ChatTemplateTokens(config.record_tokenizer).load() if config.record_tokenizer is not None else ByteTokens()
    )
    lines = TraceLines(tokens, block_tokens=config.record_block_tokens, record_text=config.record_text)
    rotate_bytes = max(1, int(config.record_rotate_mb * BYTES_PER_MB)) if config.record_rotate_mb is not None else None
    return TraceRecorder(Path(config.record_trace), lines, rotate_bytes=rotate_bytes)


class CapturedAnswer:
    """Passes a response to the client and keeps its body's bytes for the recorder."""

    __slots__ = ("chunks", "send_to_client")

    def __init__(self, send_to_client: Send) -> None:
        self.send_to_client = send_to_client
        self.chunks: list[bytes] = []

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body":
            body = message.get("body")
            if body:
                self.chunks.append(body)
        await self.send_to_client(message)

    def answer(self) -> bytes | None:
        """The body sent so far (None: nothing was sent)."""
        if not self.chunks:
            return None
        return self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
