"""Collecting a run: k6's outputs and the servers' /metrics into the run's columns, its
per-second series and its per-request figures, stored; and, for a run that ended early,
whatever figures k6 gave so far.

k6's samples were read while the load ran (``k6_driver.K6Process.results``: a pipe, never
the disk), so collecting them is only finishing their stream; a run folder holding a raw
copy (``k6.ndjson`` or ``k6.ndjson.gz``) is read when no k6 process is at hand. The
arithmetic is ``run_figures``'s; this module reads the servers and writes the series and
requests to the database.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from lab.analysis.semantic_cache import semantic_part
from lab.measurement import k6_ndjson, k6_ndjson_files, k6_results, request_figures, server_metrics, trace_figures
from lab.measurement.results import FigurePart, RunResults
from lab.run import decisions
from lab.run import figures as run_figures
from lab.run.final_state import PART_WRITERS, retry_while_unreachable
from lab.run.k6_driver import K6Process
from lab.run.steps import RunTargets
from lab.specs.schema import RunSpec
from services.manager import ServiceManager


@dataclass(frozen=True)
class CollectedRun:
    """What a finished load gave: the run's typed figures, the client/server cross-checks and the
    raw /metrics snapshots; :meth:`as_columns` is the store's write, made once at the end."""

    results: RunResults
    count_check: dict[str, Any] = field(default_factory=dict)
    server_metrics: dict[str, Any] = field(default_factory=dict)

    def with_parts(self, *parts: FigurePart) -> CollectedRun:
        """The same, with the figures of ``parts`` written over."""
        return replace(self, results=self.results.with_parts(*parts))

    def as_columns(self) -> dict[str, Any]:
        """The run's columns as the store writes them."""
        return {**self.results.as_columns(), "count_check": self.count_check, "server_metrics": self.server_metrics}


log = logging.getLogger(__name__)

# Lines of each service's log stored with the run (shown under its figures).
SERVICE_LOG_TAIL_LINES = 30

Snapshots = dict[str, server_metrics.Snapshot | None]
StreamResults = tuple[k6_ndjson.PerSecondSeries, k6_ndjson.RequestSamples]


class RunCollector:
    """Reads one run's outputs into its figures (and what could not be read, for its warnings)."""

    def __init__(
        self,
        *,
        engine: Engine,
        services: ServiceManager,
        run_id: int,
        run_dir: Path,
        contention_threshold_percent: float,
        database_retry_s: float = 60.0,
        k6_process: Callable[[], K6Process | None] | None = None,
    ) -> None:
        self.engine = engine
        # The run's k6 (its samples were read as it ran); None: read a raw copy in the run folder.
        self.k6_process = k6_process or (lambda: None)
        self._stream_results: StreamResults | None = None
        self.services = services
        self.run_id = run_id
        self.run_dir = run_dir
        self.contention_threshold_percent = contention_threshold_percent
        # How long the series' write waits for a database that cannot be reached (the final write's patience).
        self.database_retry_s = database_retry_s
        # Why a service's /metrics could not be read (an external target may serve anything).
        self.metrics_problems: dict[str, str] = {}
        self.cache_errors = 0  # answers the proxy served without Redis (X-Cache: ERROR)
        # Rows of the run the database could not take (it was unreachable): written with the final state.
        self.unsaved_parts: dict[str, dict[str, Any]] = {}

    @property
    def summary_path(self) -> Path:
        return self.run_dir / "summary.json"

    @property
    def ndjson_path(self) -> Path:
        return self.run_dir / "k6.ndjson"

    def error_answers(self) -> dict[str, int]:
        """How many failed requests got each error answer (status and message): from the k6
        process that read its samples, else from a raw copy in the run folder."""
        k6 = self.k6_process()
        if k6 is not None:
            return k6.error_answers()
        try:
            return dict(k6_ndjson_files.error_answers(self.ndjson_path))
        except OSError as error:
            log.warning("run %s: k6's error answers could not be read: %s", self.run_id, error)
            return {}

    def stream_results(self) -> StreamResults | None:
        """k6's samples as the run's series and per-request figures: from the k6 process that
        read them as they came, else from a raw copy in the run folder; None when neither."""
        if self._stream_results is None:
            k6 = self.k6_process()
            results = k6.results() if k6 is not None else None
            if results is None:
                raw_copies = (self.ndjson_path, self.ndjson_path.with_name(self.ndjson_path.name + ".gz"))
                raw_copy = next((path for path in raw_copies if path.is_file()), None)
                results = k6_ndjson_files.stream_file(raw_copy) if raw_copy is not None else None
            self._stream_results = results
        return self._stream_results

    def scrape_all(self, spec: RunSpec, targets: RunTargets) -> Snapshots:
        """Both ends' /metrics; one that cannot be read is None, and its reason is kept for a warning."""
        sources = {"backend": (targets.backend_url, spec.backend_kind.metrics.prefixes)}
        if targets.proxy_url:
            sources["cache_proxy"] = (targets.proxy_url, server_metrics.CACHE_PROXY_PREFIXES)
        snapshots: Snapshots = {}
        for name, (url, prefixes) in sources.items():
            result = server_metrics.read_metrics(url, prefixes=prefixes)
            snapshots[name] = result.snapshot
            if result.problem:
                self.metrics_problems.setdefault(name, result.problem)
        return snapshots

    def _optional_parts(self, before: Snapshots, after: Snapshots) -> list[FigurePart]:
        """The parts only some runs have: a trace replay's, the semantic cache's."""
        cache_change = server_metrics.delta(before.get("cache_proxy"), after.get("cache_proxy"))
        return [
            part
            for part in (trace_figures.trace_part(self.run_dir, self.summary_path), semantic_part(cache_change))
            if part is not None
        ]

    def collect(
        self,
        spec: RunSpec,
        targets: RunTargets,
        before: Snapshots,
        samples: list[dict[str, Any]],
        server_samples: list[dict[str, Any]],
        *,
        partial: bool = False,
    ) -> CollectedRun:
        """Parse k6's outputs and the server metrics (and store the series): one :class:`RunResults`
        assembled from each producer's typed part, the cross-checks, the raw metrics."""
        figures: dict[str, Any] = k6_results.parse_summary(self.summary_path) if self.summary_path.is_file() else {}
        client = k6_results.client_figures(figures)
        stream = self.stream_results()
        series = stream[0] if stream is not None else None
        if series is not None and not figures:  # no summary (k6 killed): figures from the stream
            client = series.client_figures()
        series_doc = run_figures.series_document(series, resource_samples=samples, server_samples=server_samples)
        self._store_series(targets, series_doc)

        after = self.scrape_all(spec, targets) if not partial else {}
        backend_change = server_metrics.delta(before.get("backend"), after.get("backend"))
        backend = server_metrics.backend_figures(backend_change, spec.backend_kind.metrics)
        cache = None
        if targets.proxy_url:
            cache = server_metrics.cache_figures(
                server_metrics.delta(before.get("cache_proxy"), after.get("cache_proxy"))
            )
            self.cache_errors = cache["response_cache_errors"] or 0
        checks = run_figures.count_checks(figures, backend=backend, cache=cache, max_tokens=spec.max_tokens)
        response_cache = server_metrics.response_cache_part(
            cache, client_hit_rate=RunResults.of_record(figures).response_cache_hit_rate
        )
        steady = run_figures.steady_figures(
            series_doc,
            figures,
            backend,
            load_duration_s=spec.load.planned_duration_s,
            behind_cache=bool(targets.proxy_url),
            response_cache_hits=response_cache.response_cache_hits if cache else None,
        )
        results = RunResults.from_parts(
            client,
            server_metrics.backend_part(backend),
            response_cache,
            run_figures.resource_figures(samples, backend_service=targets.backend_service),
            steady,
            *self._optional_parts(before, after),
        )
        results = results.with_parts(
            run_figures.check_figures(
                results,
                checks,
                contention_threshold_percent=self.contention_threshold_percent,
                load_duration_s=spec.load.planned_duration_s,
            )
        )
        return CollectedRun(
            results=results,
            count_check=checks,
            server_metrics={"before": before, "after": after, "delta": {"backend": backend_change}},
        )

    def _store_series(self, targets: RunTargets, series_doc: dict[str, Any]) -> None:
        """The per-second series with the services' log tails, and every request's figures
        (so any SLO can be evaluated on this run later)."""
        log_tails = {name: self._log_tail(name) for name in targets.service_names}
        self._store_part("series", {"series": series_doc, "service_log_tails": log_tails})
        stream = self.stream_results()
        if stream is not None:
            self._store_part("requests", request_figures.encode(stream[1]))

    def _store_part(self, name: str, values: dict[str, Any]) -> None:
        """Write one of the run's rows (series, requests), waiting for a database that cannot be
        reached; if it stays away, the row is kept (``unsaved_parts``) to go with the final state."""
        try:
            retry_while_unreachable(
                lambda: PART_WRITERS[name](engine=self.engine, run_id=self.run_id, **values),
                budget_s=self.database_retry_s,
            )
        except SQLAlchemyError as error:
            if not decisions.database_unreachable(error):
                raise
            log.warning(
                "run %s: its %s wait for the database (%s)", self.run_id, name, decisions.write_failure_message(error)
            )
            self.unsaved_parts[name] = values

    def _log_tail(self, name: str) -> str:
        """A service's log tail, or nothing while the database (which knows its log's path) is unreachable."""
        try:
            return self.services.log_tail(name, SERVICE_LOG_TAIL_LINES)
        except SQLAlchemyError as error:
            log.warning("run %s: %s's log tail not read: %s", self.run_id, name, decisions.write_failure_message(error))
            return ""

    def partial_columns(
        self,
        spec: RunSpec,
        targets: RunTargets,
        before: Snapshots,
        samples: list[dict[str, Any]],
        server_samples: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """Whatever k6 wrote before a failure, cancel or stop (figures; the series is stored too)."""
        try:
            return self.collect(spec, targets, before, samples, server_samples, partial=True).as_columns()
        except Exception as error:
            log.warning(
                "run %s: partial figures not complete: %s",
                self.run_id,
                decisions.write_failure_message(error) or f"{type(error).__name__}: {error}",
            )
        # Nothing stored (a database error) or no readable summary (a full disk): the
        # figures from whichever of k6's files can still be read, without writing anything.
        try:
            return decisions.partial_columns(
                k6_results.parse_summary(self.summary_path), decisions.PARTIAL_SUMMARY_COLUMNS
            )
        except Exception:
            pass
        try:
            stream = self.stream_results()
            if stream is None:
                return {}
            return decisions.partial_columns(stream[0].client_figures().figures(), decisions.PARTIAL_SERIES_COLUMNS)
        except Exception:
            return {}
