"""A circuit breaker: the proxy stops asking a failing Redis for a while (fail-open)."""

from __future__ import annotations

import time
from collections.abc import Callable


class CircuitBreaker:
    """Stops calling a failing dependency for a while.

    Closed: every call allowed. After ``failure_threshold`` consecutive failures it opens:
    no call for ``open_s`` seconds. Then half-open: one trial call is allowed (another one
    only if the trial has not reported within ``open_s``); its success closes the breaker,
    its failure opens it again.
    """

    def __init__(self, *, failure_threshold: int = 3, open_s: float = 2.0, clock: Callable[[], float] = time.monotonic):
        self.failure_threshold = failure_threshold
        self.open_s = open_s
        self._clock = clock
        self._consecutive_failures = 0
        # Monotonic time the breaker opened, None while closed (read by the proxy to
        # update its gauge without a clock call on the hot path).
        self.opened_at: float | None = None
        self._trial_started_at: float | None = None

    @property
    def state(self) -> str:
        """``closed``, ``open`` or ``half-open``."""
        if self.opened_at is None:
            return "closed"
        if self._clock() - self.opened_at < self.open_s:
            return "open"
        return "half-open"

    def allow(self) -> bool:
        """May the caller use the dependency now?"""
        if self.opened_at is None:
            return True
        now = self._clock()
        if now - self.opened_at < self.open_s:
            return False
        if self._trial_started_at is not None and now - self._trial_started_at < self.open_s:
            return False
        self._trial_started_at = now
        return True

    def record_success(self) -> None:
        """A call succeeded: close."""
        self._consecutive_failures = 0
        self.opened_at = None
        self._trial_started_at = None

    def record_failure(self) -> None:
        """A call failed: count it; open when the threshold is reached (or the trial failed)."""
        self._consecutive_failures += 1
        if self.opened_at is not None or self._consecutive_failures >= self.failure_threshold:
            self.opened_at = self._clock()
            self._trial_started_at = None
