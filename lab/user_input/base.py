"""The base of every spec model: unknown fields are errors, assignments are validated.

Its own module so that the backend and workload registries, which declare option models,
and :mod:`lab.specs.schema`, which collects them, import it without a cycle."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)
