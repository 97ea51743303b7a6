"""The JSON documents the store keeps in its JSON columns (a run's spec and environment, its
per-second series, a capacity search's state), typed as what they are: JSON.

:data:`JsonObject` is what ``json.loads`` gives for an object and ``json.dumps`` takes back. Code
that walks a document whatever its keys (flattening a spec, comparing two, hashing one) takes a
``JsonObject``, a function that only reads one takes a ``Mapping[str, object]`` (any document,
a test's literal too); a reader narrows a value (``isinstance``) before it uses it as a number or a
string. A document whose shape the lab declares is typed where it is built (a ``TypedDict`` such
as ``lab.measurement.k6_results.K6Summary``, or the pydantic model it is the dump of).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

JsonValue: TypeAlias = "str | int | float | bool | list[JsonValue] | dict[str, JsonValue] | None"
JsonObject: TypeAlias = "dict[str, JsonValue]"


def section_of(document: Mapping[str, object], key: str) -> Mapping[str, object]:
    """A document's object ``key`` (a spec's ``load``, ``workload``...); empty when absent or not an object."""
    section = document.get(key)
    return section if isinstance(section, dict) else {}
