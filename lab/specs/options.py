"""The options the registries declare, resolved against the spec schema.

A workload lists its :class:`~lab.specs.fields.OptionField`s; this module adds what the
pydantic models know (the input's type and default) so a form can draw them
(:func:`workload_inputs`), checks values a form collected field by field
(:func:`workload_option_errors`), turns them into the spec's ``workload`` part
(:func:`workload_part`) and names every settable option for the CLI's ``--set`` help
(:func:`settable_options`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from lab import backends, workloads
from lab.specs.fields import OptionField, fields_of_model
from lab.specs.schema import WorkloadSpec, set_dotted_lenient

InputKind = Literal["int", "float", "bool", "text", "upload"]


@dataclass(frozen=True)
class OptionInput:
    """One input of the form: the declared field, its widget kind, starting value and help."""

    option: OptionField
    kind: InputKind
    default: Any
    help: str


def _field_info(workload: workloads.Workload, option: OptionField) -> FieldInfo:
    """The pydantic field behind a declared option: its section's model or the flat spec."""
    if option.section:
        if workload.options_model is None or option.name not in workload.options_model.model_fields:
            raise ValueError(f"workload {workload.name!r} declares {option.path!r}, which its options model lacks")
        return workload.options_model.model_fields[option.name]
    return WorkloadSpec.model_fields[option.name]


def _input_kind(option: OptionField, info: FieldInfo) -> InputKind:
    if option.upload:
        return "upload"
    for python_type, kind in ((bool, "bool"), (int, "int"), (float, "float")):
        if info.annotation is python_type:
            return kind  # type: ignore[return-value]
    return "text"


def workload_inputs(kind: str) -> list[OptionInput]:
    """The inputs the form draws for workload ``kind``, in the order it declares them."""
    workload = workloads.get_workload(kind)
    inputs = []
    for option in workload.form_fields():
        info = _field_info(workload, option)
        default = option.default if option.default is not None else info.get_default(call_default_factory=True)
        inputs.append(OptionInput(option, _input_kind(option, info), default, option.help or info.description or ""))
    return inputs


def _message(item: dict[str, Any]) -> str:
    return item["msg"].removeprefix("Value error, ")


def _flat_error(name: str, value: Any) -> str | None:
    """The validation message of one flat workload field, or None."""
    try:
        WorkloadSpec.model_validate({name: value})
    except ValidationError as error:
        relevant = [_message(item) for item in error.errors() if item["loc"] and item["loc"][0] == name]
        return "; ".join(relevant) or None
    return None


def _section_errors(section: str, model: type[BaseModel], values: dict[str, Any]) -> dict[str, str]:
    """Messages of an option section's values: ``{section.field: ...}`` for one field,
    ``{section: ...}`` for a rule across fields."""
    try:
        model.model_validate(values)
    except ValidationError as error:
        errors: dict[str, str] = {}
        for item in error.errors():
            if item["loc"]:
                key, label = f"{section}.{item['loc'][0]}", str(item["loc"][0]).replace("_", " ")
            else:
                key, label = section, section
            errors[key] = f"{label}: {_message(item)}"
        return errors
    return {}


def workload_option_errors(kind: str, values: dict[str, Any]) -> dict[str, str]:
    """Check the values a form collected for workload ``kind`` (``{option path: value}``;
    an option left out keeps its default).

    Returns ``{option path or section: message}``, empty when every value is acceptable."""
    workload = workloads.get_workload(kind)
    errors: dict[str, str] = {}
    sections: dict[str, dict[str, Any]] = {}
    for option in workload.form_fields():
        value = values.get(option.path)
        if option.required and value in (None, ""):
            errors[option.path] = f"the {kind} workload needs a file here: upload one below first"
        elif option.path not in values:
            continue  # not collected: the model's default applies
        elif option.section:
            sections.setdefault(option.section, {})[option.name] = value
        elif value is not None and (message := _flat_error(option.name, value)):
            errors[option.path] = f"{option.name.replace('_', ' ')}: {message}"
    if workload.options_model is not None:
        for section, section_values in sections.items():
            errors.update(_section_errors(section, workload.options_model, section_values))
    return errors


def workload_part(kind: str, values: dict[str, Any], *, stream: bool) -> dict[str, Any]:
    """The spec's ``workload`` part from a form's option values (unset uploads left out)."""
    part: dict[str, Any] = {"kind": kind, "stream": stream}
    for option in workloads.get_workload(kind).form_fields():
        value = values.get(option.path)
        if value is not None:
            set_dotted_lenient(part, option.path, value)
    return part


def settable_options() -> list[str]:
    """Every option a registered kind declares, as ``--set`` keys: ``workload.prompts
    (number-story)``, ``vllm.block_size``..."""
    keys: dict[str, list[str]] = {}
    for name in workloads.workload_names():
        for option in workloads.get_workload(name).form_fields():
            keys.setdefault(f"workload.{option.path}", []).append(name)
    named = [f"{key} ({', '.join(kinds)})" for key, kinds in keys.items()]
    for kind, model in backends.options_sections().items():
        named.extend(option.path for option in fields_of_model(model, kind))
    return named
