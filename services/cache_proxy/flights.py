"""Upstream calls that end when nobody waits for them any more.

Each upstream call (a miss, a bypass, a pass-through) runs in its own task, a
:class:`Flight`, and every client waiting for it watches its own connection. A client that
leaves stops waiting; when the last one has left, the task is cancelled, which closes the
upstream connection, and the upstream sees its client leave as if it had been called
directly (the naive server, vLLM and llama.cpp then stop generating). So a request k6
abandons at its graceful stop does not keep a ``+cache`` backend busy after the run.

Single-flight: concurrent identical misses join the first one's flight (keyed by the cache
key, which holds the requester's HMAC, so a group never spans two credentials). The first
client gets the answer as it arrives; the others get the whole answer once it is complete
and storable, or ask the upstream themselves when it is not. If the first client leaves
while others wait, the call goes on for them, and nothing more is sent to the one who left.

Stored before the last byte: a streamed answer is stored, and handed to the followers, the
moment its ``data: [DONE]`` event is complete, before that last chunk goes to the first
client (:func:`~services.cache_proxy.upstream.relay_stream`); a plain answer is stored before
any of it is sent. So no client has a whole answer that is not yet in the cache: an identical
request sent as soon as one has read it is a hit, however soon that client then closes its
connection (which cancels the call), and whenever the upstream ends its response.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import httpx

from services.cache_proxy.metrics import ProxyMetrics
from services.cache_proxy.policy import XCache, is_cacheable_json_answer, is_storable_stream, response_allows_storing
from services.cache_proxy.responses import (
    JSON_CONTENT_TYPE,
    SSE_CONTENT_TYPE,
    Message,
    Receive,
    Scope,
    Send,
    forwarded_response_headers,
    json_headers,
    send_upstream_error,
    send_whole,
)
from services.cache_proxy.upstream import UpstreamAnswer, relay_stream, upstream_request

# store(key, content type, body) -> stored?
StoreAnswer = Callable[[str, bytes, bytes], Awaitable[bool]]


@dataclass
class WholeResponse:
    """A plain (non-stream) upstream answer, read whole, for the first client."""

    status_code: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    store_failed: bool


@dataclass
class FlightOutcome:
    """What a finished flight leaves: the answer followers may share (None: ask the
    upstream yourselves), and for a plain answer the response the first client gets."""

    shared: UpstreamAnswer | None
    whole: WholeResponse | None = None


@dataclass
class Flight:
    """One upstream call in its task, and how many clients still wait for it.

    ``settled`` holds, once known, the answer followers share (None: ask the upstream
    yourselves): set as soon as a stream is complete and stored, else when the task ends."""

    task: asyncio.Task[FlightOutcome] | None = None
    waiters: int = 1
    first_client_gone: bool = False
    on_cancel: list[Callable[[], None]] = field(default_factory=list)
    settled: asyncio.Future[UpstreamAnswer | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def settle(self, answer: UpstreamAnswer | None) -> None:
        """Hand ``answer`` to the followers (the first call wins)."""
        if not self.settled.done():
            self.settled.set_result(answer)

    def settle_from_task(self, task: asyncio.Task[FlightOutcome]) -> None:
        """The task ended: followers get its shareable answer, if it left one."""
        self.settle(None if task.cancelled() or task.exception() is not None else task.result().shared)

    def leave(self) -> None:
        """A waiting client left: when it was the last, cancel the call."""
        self.waiters -= 1
        if self.waiters <= 0 and self.task is not None and not self.task.done():
            for callback in self.on_cancel:
                callback()
            self.task.cancel()


async def until_disconnected(receive: Receive) -> None:
    """Return once the client has gone (its body is read, so the next message says so)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def wait_or_leave(flight: Flight, receive: Receive, until: asyncio.Future[Any]) -> bool:
    """Wait for ``until`` (the flight's task, or its settled answer) while watching the
    client; True when it is done, False when the client left first (then it no longer
    counts as a waiter)."""
    watch = asyncio.ensure_future(until_disconnected(receive))
    try:
        await asyncio.wait((until, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not watch.done():
            watch.cancel()
    if until.done():
        return True
    flight.leave()
    return False


async def run_in_task(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Await ``coroutine`` in an asyncio Task of its own when the app is not running in one.

    granian steps the app's coroutine with its own scheduler, which cannot resume a
    coroutine after throwing an awaited future's exception into it: code that awaits
    libraries raising that way (httpx on a refused connection) runs in a real Task, and
    its exception is raised here, once it is done."""
    if type(asyncio.current_task()) is asyncio.Task:
        return await coroutine
    task = asyncio.ensure_future(coroutine)
    await asyncio.wait((task,))
    return task.result()


class UpstreamFlights:
    """The proxy's upstream calls (see the module docstring); ``http`` is set when the
    proxy opens its clients."""

    def __init__(self, *, upstream_url: str, metrics: ProxyMetrics, store: StoreAnswer):
        self.upstream_url = upstream_url
        self.metrics = metrics
        self.store = store
        self.http: httpx.AsyncClient | None = None
        self._inflight: dict[str, Flight] = {}

    async def miss(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        raw_body: bytes,
        streaming: bool,
        key: str,
        *,
        single_flight: bool,
    ) -> None:
        """A miss: ask upstream and store when allowed; with single-flight, join an
        identical call in flight instead of making another."""
        flight = self._inflight.get(key) if single_flight else None
        if flight is None:
            await self.call(
                scope,
                receive,
                send,
                raw_body,
                streaming,
                XCache.MISS,
                store_key=key,
                group_key=key if single_flight else None,
            )
            return
        flight.waiters += 1
        if not await wait_or_leave(flight, receive, flight.settled):
            return
        answer = flight.settled.result()
        flight.leave()  # answered (the call may still be running, past its answer's end)
        if answer is None:
            # The first client got no shareable answer (an error, a broken stream,
            # no-store): ask the upstream ourselves.
            await self.call(scope, receive, send, raw_body, streaming, XCache.MISS, store_key=key)
            return
        self.metrics.single_flight_shared.inc()
        await send_whole(
            send, answer.status_code, json_headers(answer.body, XCache.MISS, answer.content_type), answer.body
        )

    async def call(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        raw_body: bytes,
        streaming: bool,
        x_cache: XCache,
        *,
        store_key: str | None,
        group_key: str | None = None,
        record: bool = True,
    ) -> None:
        """Call upstream for one client, answer it (as the answer arrives when
        ``streaming``), store the answer under ``store_key`` when allowed; cancelled when
        the client (and every follower of ``group_key``) has left. Raises
        :class:`~services.cache_proxy.responses.BadRequestTarget` before anything is sent."""
        assert self.http is not None
        request = upstream_request(self.http, self.upstream_url, scope, raw_body)
        flight = Flight()
        if streaming:
            worker = self._relay(
                flight,
                request,
                send,
                x_cache,
                store_key=store_key,
                record=record and (store_key is not None or group_key is not None),
            )
        else:
            worker = self._fetch_whole(request, store_key=store_key)
        flight.task = asyncio.ensure_future(worker)
        flight.task.add_done_callback(flight.settle_from_task)
        if group_key is not None:
            self._join_group(group_key, flight)
        if not await wait_or_leave(flight, receive, flight.task):
            flight.first_client_gone = True
            return
        try:
            outcome = flight.task.result()
        except httpx.HTTPError as error:  # before anything was sent to the client
            await send_upstream_error(send, error, x_cache)
            return
        whole = outcome.whole
        if whole is not None:
            headers = [
                *whole.headers,
                (b"x-cache", (XCache.ERROR if whole.store_failed else x_cache).value),
                (b"content-length", b"%d" % len(whole.body)),
            ]
            await send_whole(send, whole.status_code, headers, whole.body)

    def _join_group(self, group_key: str, flight: Flight) -> None:
        self._inflight[group_key] = flight

        def forget(*_: Any) -> None:
            if self._inflight.get(group_key) is flight:
                del self._inflight[group_key]

        # Gone from the group as soon as it is cancelled: a request arriving then starts its own.
        flight.on_cancel.append(forget)
        assert flight.task is not None
        flight.task.add_done_callback(forget)

    async def _fetch_whole(self, request: httpx.Request, *, store_key: str | None) -> FlightOutcome:
        """A plain answer, read whole and stored when allowed."""
        assert self.http is not None
        started_at = time.perf_counter()
        response = await self.http.send(request)
        self.metrics.upstream_latency.observe(time.perf_counter() - started_at)
        body = response.content
        content_type = response.headers.get("content-type", "application/json").encode("latin-1")
        shareable = is_cacheable_json_answer(response.status_code, body) and response_allows_storing(
            response.headers.multi_items()
        )
        store_failed = False
        if store_key is not None and shareable:
            stored_type = JSON_CONTENT_TYPE if content_type.startswith(JSON_CONTENT_TYPE) else content_type
            store_failed = not await self.store(store_key, stored_type, body)
        headers = [
            (name, value) for name, value in forwarded_response_headers(response, XCache.MISS) if name != b"x-cache"
        ]
        whole = WholeResponse(response.status_code, headers, body, store_failed)
        return FlightOutcome(UpstreamAnswer(response.status_code, content_type, body) if shareable else None, whole)

    async def _relay(
        self,
        flight: Flight,
        request: httpx.Request,
        send: Send,
        x_cache: XCache,
        *,
        store_key: str | None,
        record: bool,
    ) -> FlightOutcome:
        """Pass an answer through as it arrives; once complete (an SSE stream's ``[DONE]``
        event, before its last chunk is sent; else the answer's end) store it and offer it to
        followers."""
        assert self.http is not None

        async def send_to_first_client(message: Message) -> None:
            if not flight.first_client_gone:
                await send(message)

        started_at = time.perf_counter()
        response = await self.http.send(request, stream=True)
        headers = forwarded_response_headers(response, x_cache)
        content_type = response.headers.get("content-type", "").encode("latin-1")
        is_sse = content_type.startswith(SSE_CONTENT_TYPE)
        # The headers leave with the first chunk: an upstream that sends its headers before
        # its first token (vLLM, llama.cpp) would otherwise hide its TTFT from the client.
        start: dict[str, Any] = {"type": "http.response.start", "status": response.status_code, "headers": headers}
        settled: list[UpstreamAnswer | None] = []  # the answer settled at [DONE], if it was

        async def store_and_share(chunks: list[bytes]) -> None:
            whole = b"".join(chunks)
            settled.append(await self._store_stream(response, whole, store_key=store_key))
            flight.settle(settled[0])

        try:
            relayed = await relay_stream(
                response,
                send_to_first_client,
                start,
                record=record,
                before_last_event=store_and_share if is_sse else None,
            )
        finally:
            await response.aclose()
            self.metrics.upstream_latency.observe(time.perf_counter() - started_at)
        if settled:
            answer = settled[0]
        elif is_sse:  # no complete [DONE] event came: judged whole, at the end
            whole = b"".join(relayed.chunks)
            answer = await self._store_stream(response, whole, store_key=store_key) if record else None
        else:  # a plain answer to a stream request: shared, not stored (a hit is served only in the kind asked for)
            whole = b"".join(relayed.chunks)
            shareable = record and is_storable_stream(
                response.status_code, response.headers.multi_items(), whole, is_sse=False
            )
            answer = UpstreamAnswer(response.status_code, content_type, whole) if shareable else None
        if not relayed.start_sent:  # an empty answer
            await send_to_first_client(start)
        await send_to_first_client({"type": "http.response.body", "body": b""})
        return FlightOutcome(answer)

    async def _store_stream(
        self, response: httpx.Response, whole: bytes, *, store_key: str | None
    ) -> UpstreamAnswer | None:
        """Store a complete SSE answer under ``store_key`` (when given) and return it for the
        followers; None when it may not be kept. The store is shielded: once begun it ends,
        even if the call is cancelled meanwhile (its last client left)."""
        if not is_storable_stream(response.status_code, response.headers.multi_items(), whole, is_sse=True):
            return None
        if store_key is not None:
            await asyncio.shield(self.store(store_key, SSE_CONTENT_TYPE, whole))
        return UpstreamAnswer(response.status_code, SSE_CONTENT_TYPE, whole)
