"""Failed requests' error answers read back from k6's NDJSON (k6/lib.js tags each failure's
``lab_request_failures`` sample with ``lab_error``): the counts a run without a success quotes."""

from __future__ import annotations

import json
from pathlib import Path

from lab.measurement.k6_ndjson_files import error_answers


def point(metric: str, tags: dict, value: float = 1) -> str:
    return json.dumps(
        {"metric": metric, "type": "Point", "data": {"time": "2026-12-01T12:00:00.5Z", "value": value, "tags": tags}},
        separators=(",", ":"),
    )


def test_error_answers_are_counted_from_the_failure_samples(tmp_path: Path) -> None:
    context = "400 This model's maximum context length is 8192 tokens."
    lines = [
        json.dumps({"metric": "lab_request_failures", "type": "Metric", "data": {}}),
        point("lab_request_failures", {"lab_request": "chat", "lab_error": context}),
        point("http_req_duration", {"lab_request": "chat", "status": "400"}, 12.0),
        point("lab_request_failures", {"lab_request": "chat", "lab_error": context}),
        point("lab_request_failures", {"lab_request": "chat", "lab_error": "no answer: request timeout"}),
        point("lab_request_failures", {"lab_request": "chat"}),  # a script of before the tag: not counted
        '{"metric":"lab_request_failures","type":"Point","data":{"tags":{"lab_error":"cut',  # k6 killed mid-line
    ]
    path = tmp_path / "k6.ndjson"
    path.write_text("\n".join(lines))
    assert error_answers(path) == {context: 2, "no answer: request timeout": 1}
    assert error_answers(tmp_path / "missing.ndjson") == {}
