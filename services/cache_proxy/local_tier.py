"""The in-process tier: an LRU of stored answers kept coherent by Redis's invalidations."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any


class LocalTier:
    """An in-process LRU of stored answers, kept coherent by Redis itself.

    Redis's client tracking (``CLIENT TRACKING ON REDIRECT``) remembers every key the
    proxy's connection read and pushes an invalidation message on a second connection
    when that key is overwritten, deleted, expired, evicted or flushed;
    :meth:`invalidate` drops it here. Entries also carry the key's remaining TTL (read
    with the value), so an expiry is honoured even before Redis gets round to it.

    Races: a value is filled only by the read that began :meth:`begin_fill`; an
    invalidation (or a lost connection) between the read being sent and its reply
    cancels the fill. While tracking is not confirmed (:attr:`coherent` False) nothing is
    filled or served. Bounded by ``max_entries`` and ``max_bytes`` (values over
    ``max_bytes // 16`` are never kept).
    """

    def __init__(
        self,
        *,
        max_entries: int,
        max_bytes: int,
        clock: Callable[[], float] = time.monotonic,
        prepare: Callable[[bytes], Any] = bytes,
    ):
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_value_bytes = max_bytes // 16
        self._clock = clock
        # What get() returns for a stored value, computed once per fill (the proxy keeps
        # the answer's headers ready, so a local hit formats nothing); None: not kept.
        self._prepare = prepare
        # key -> (prepared value, its size in bytes, deadline or None)
        self._entries: OrderedDict[str, tuple[Any, int, float | None]] = OrderedDict()
        self._fills: dict[str, object] = {}
        self.bytes_used = 0
        self.coherent = False
        self.epoch = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> Any:
        """The prepared stored value, or None (absent, expired, or the tier is not coherent)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        value, _, deadline = entry
        if deadline is not None and self._clock() >= deadline:
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return value

    def begin_fill(self, key: str) -> object | None:
        """Call before reading ``key`` from Redis; None when the tier cannot be filled now."""
        if not self.coherent:
            return None
        token = (self.epoch, object())
        self._fills[key] = token
        return token

    def finish_fill(self, key: str, token: object, value: bytes | None, ttl_ms: int) -> None:
        """Keep ``value`` read for ``key`` unless an invalidation came in between."""
        if self._fills.get(key) is not token:
            return
        del self._fills[key]
        if value is None or not self.coherent or len(value) > self.max_value_bytes or ttl_ms == -2:
            return
        prepared = self._prepare(value)
        if prepared is None:  # a value the proxy would not serve (see responses.prepared_hit)
            return
        deadline = self._clock() + ttl_ms / 1000 if ttl_ms >= 0 else None
        self._drop(key)
        self._entries[key] = (prepared, len(value), deadline)
        self.bytes_used += len(value)
        while len(self._entries) > self.max_entries or self.bytes_used > self.max_bytes:
            _, (_, evicted_bytes, _) = self._entries.popitem(last=False)
            self.bytes_used -= evicted_bytes

    def abandon_fill(self, key: str, token: object) -> None:
        """The read failed: forget the fill."""
        if self._fills.get(key) is token:
            del self._fills[key]

    def invalidate(self, keys: Iterable[bytes | str] | None) -> None:
        """Redis said these keys changed (None: everything, after a FLUSHDB/FLUSHALL)."""
        if keys is None:
            self.clear()
            return
        for key in keys:
            name = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
            self._fills.pop(name, None)
            self._drop(name)

    def clear(self) -> None:
        """Drop every entry and cancel every fill in progress."""
        self._entries.clear()
        self._fills.clear()
        self.bytes_used = 0

    def enable(self) -> None:
        """Tracking is confirmed on the current connection: start a new epoch."""
        self.clear()
        self.epoch += 1
        self.coherent = True

    def disable(self) -> None:
        """Invalidations may be lost from now on: serve and fill nothing."""
        self.coherent = False
        self.epoch += 1
        self.clear()

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.bytes_used -= entry[1]
