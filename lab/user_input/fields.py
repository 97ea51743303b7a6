"""How a registered kind declares the options a person sets: :class:`OptionField`.

A workload or a backend lists the spec fields a form shows and the CLI's ``--set`` help
names, with what the form needs beyond the pydantic model (a label, a step, an upload to
choose). Bounds, types and defaults stay in the pydantic model, which validates them.
A leaf module, so that the registries declare fields without importing the spec schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

UploadKind = Literal["sharegpt", "jsonl", "trace"]


@dataclass(frozen=True)
class OptionField:
    """One option of a kind: ``path`` is dotted under the kind's spec part. A workload's
    part is the spec's ``workload`` (``prompts`` is ``workload.prompts``; ``synthetic.prompts``
    is in its option section); a backend's is the run spec itself, its section named after
    the kind (``vllm.block_size``)."""

    path: str
    label: str
    help: str = ""
    step: float | None = None  # the number input's step; None: the field's type decides
    default: Any = None  # the form's starting value when it differs from the model's
    upload: UploadKind | None = None  # chosen among the stored uploads of this kind
    required: bool = False  # an upload the workload cannot run without
    none_label: str = ""  # what leaving an optional upload unset means, for the form

    @property
    def section(self) -> str | None:
        """The option section the field lives in (None: a flat field of the spec part)."""
        return self.path.split(".", 1)[0] if "." in self.path else None

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]


def fields_of_model(model: type[BaseModel], section: str | None = None) -> tuple[OptionField, ...]:
    """Every field of an options model as an OptionField, labelled by its description:
    what a kind that declares no fields of its own shows."""
    prefix = f"{section}." if section else ""
    return tuple(
        OptionField(
            f"{prefix}{name}", info.title or info.description or name.replace("_", " "), help=info.description or ""
        )
        for name, info in model.model_fields.items()
    )


def declared_fields(
    option_fields: tuple[OptionField, ...], options_model: type[BaseModel] | None, section: str | None
) -> tuple[OptionField, ...]:
    """What a kind shows and ``--set`` names: the fields it declares, or, when it declares
    none but has an options model, every field of that model (under ``section``)."""
    if option_fields or options_model is None:
        return option_fields
    return fields_of_model(options_model, section)
