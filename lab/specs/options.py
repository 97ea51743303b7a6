"""The options the registries declare, resolved against the spec schema.

A workload and a backend each list their :class:`~lab.user_input.fields.OptionField`s; one
mechanism serves both kinds (an :class:`OptionOwner` says where a kind's options sit in
the spec). This module adds what the pydantic models know (the input's type, default and
choices) so a form can draw them (:func:`workload_inputs`, :func:`backend_inputs`), checks
values a form collected field by field (:func:`workload_option_errors`,
:func:`backend_option_errors`), turns them into spec parts (:func:`workload_part`,
:func:`backend_sections`) and names every settable option for the CLI's ``--set`` help
(:func:`settable_options`).
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from lab import backends, workloads
from lab.specs.schema import WorkloadSpec, set_dotted_lenient
from lab.user_input.fields import OptionField

InputKind = Literal["int", "float", "bool", "choice", "text", "upload"]


@dataclass(frozen=True)
class OptionOwner:
    """A registered kind that declares options: what messages call it, its fields, and
    the models that check them (its option section's; the flat fields' where it has any)."""

    title: str  # "the custom workload", "the vllm backend"
    fields: tuple[OptionField, ...]
    section: str | None  # the one option section its fields may name
    options_model: type[BaseModel] | None
    flat_model: type[BaseModel] | None  # None: every field lives in the section


@dataclass(frozen=True)
class OptionInput:
    """One input of the form: the declared field, its widget kind, starting value, help
    and (for a choice) the values to choose among."""

    option: OptionField
    kind: InputKind
    default: Any
    help: str
    choices: tuple[Any, ...] = ()


def workload_owner(kind: str) -> OptionOwner:
    """Workload ``kind``'s options: flat fields of the spec's ``workload`` part, or its section."""
    workload = workloads.get_workload(kind)
    return OptionOwner(
        f"the {kind} workload", workload.form_fields(), workload.section, workload.options_model, WorkloadSpec
    )


def backend_owner(kind: str) -> OptionOwner:
    """Backend ``kind``'s options (``+cache`` stripped): its section, named after it."""
    backend = backends.get_backend(kind)
    return OptionOwner(f"the {backend.name} backend", backend.form_fields(), backend.name, backend.options_model, None)


def backend_kinds(spec_backends: list[str]) -> list[str]:
    """The distinct registered kinds behind spec backends (``vllm+cache`` is ``vllm``), in
    order. An unknown name is skipped: the spec's own check names it, with the known ones."""
    kinds: list[str] = []
    for name in spec_backends:
        try:
            kinds.append(backends.get_backend(name).name)
        except backends.UnknownBackendError:
            continue
    return list(dict.fromkeys(kinds))


def _field_info(owner: OptionOwner, option: OptionField) -> FieldInfo:
    """The pydantic field behind a declared option: its section's model or the flat fields'."""
    model = (owner.options_model if option.section == owner.section else None) if option.section else owner.flat_model
    if model is None or option.name not in model.model_fields:
        raise ValueError(f"{owner.title} declares {option.path!r}, which its options model lacks")
    return model.model_fields[option.name]


def _input_kind(option: OptionField, info: FieldInfo) -> tuple[InputKind, tuple[Any, ...]]:
    """The widget for a field, and its choices: an optional value (``int | None``) keeps
    its type's widget; a union of other types is typed as text and parsed by the model."""
    if option.upload:
        return "upload", ()
    annotation = info.annotation
    members = [annotation]
    if get_origin(annotation) in (Union, types.UnionType):
        members = [member for member in get_args(annotation) if member is not type(None)]
    if len(members) == 1:
        (single,) = members
        if get_origin(single) is Literal:
            return "choice", get_args(single)
        widgets: tuple[tuple[type, InputKind], ...] = ((bool, "bool"), (int, "int"), (float, "float"))
        for python_type, kind in widgets:
            if single is python_type:
                return kind, ()
    return "text", ()


def option_inputs(owner: OptionOwner) -> list[OptionInput]:
    """The inputs the form draws for ``owner``, in the order it declares them."""
    inputs = []
    for option in owner.fields:
        info = _field_info(owner, option)
        default = option.default if option.default is not None else info.get_default(call_default_factory=True)
        kind, choices = _input_kind(option, info)
        inputs.append(OptionInput(option, kind, default, option.help or info.description or "", choices))
    return inputs


def workload_inputs(kind: str) -> list[OptionInput]:
    """The inputs the form draws for workload ``kind``."""
    return option_inputs(workload_owner(kind))


def backend_inputs(kind: str) -> list[OptionInput]:
    """The inputs the form draws for backend ``kind`` (none for a kind without options)."""
    return option_inputs(backend_owner(kind))


def _message(item: ErrorDetails) -> str:
    return item["msg"].removeprefix("Value error, ")


def _flat_error(model: type[BaseModel], name: str, value: Any) -> str | None:
    """The validation message of one flat field, or None."""
    try:
        model.model_validate({name: value})
    except ValidationError as error:
        relevant = [_message(item) for item in error.errors() if item["loc"] and item["loc"][0] == name]
        return "; ".join(relevant) or None
    return None


def _section_errors(section: str, model: type[BaseModel], values: dict[str, Any]) -> dict[str, str]:
    """Messages of an option section's values: ``{section.field: ...}`` for one field (every
    message of a union's members joined), ``{section: ...}`` for a rule across fields."""
    try:
        model.model_validate(values)
    except ValidationError as error:
        messages: dict[tuple[str, str], list[str]] = {}
        for item in error.errors():
            if item["loc"]:
                key, label = f"{section}.{item['loc'][0]}", str(item["loc"][0]).replace("_", " ")
            else:
                key, label = section, section
            messages.setdefault((key, label), []).append(_message(item))
        return {key: f"{label}: {'; '.join(texts)}" for (key, label), texts in messages.items()}
    return {}


def option_errors(owner: OptionOwner, values: dict[str, Any]) -> dict[str, str]:
    """Check the values a form collected for ``owner`` (``{option path: value}``; an option
    left out keeps its default).

    Returns ``{option path or section: message}``, empty when every value is acceptable."""
    errors: dict[str, str] = {}
    section_values: dict[str, Any] = {}
    for option in owner.fields:
        value = values.get(option.path)
        if option.required and value in (None, ""):
            errors[option.path] = f"{owner.title} needs a file here: upload one below first"
        elif option.path not in values:
            continue  # not collected: the model's default applies
        elif option.section:
            section_values[option.name] = value
        elif (
            owner.flat_model is not None
            and value is not None
            and (message := _flat_error(owner.flat_model, option.name, value))
        ):
            errors[option.path] = f"{option.name.replace('_', ' ')}: {message}"
    if owner.section and owner.options_model is not None and section_values:
        errors.update(_section_errors(owner.section, owner.options_model, section_values))
    return errors


def workload_option_errors(kind: str, values: dict[str, Any]) -> dict[str, str]:
    """:func:`option_errors` of workload ``kind``."""
    return option_errors(workload_owner(kind), values)


def backend_option_errors(spec_backends: list[str], values: dict[str, Any]) -> dict[str, str]:
    """:func:`option_errors` of each kind behind ``spec_backends`` (their paths never clash:
    each starts with its kind's section)."""
    errors: dict[str, str] = {}
    for kind in backend_kinds(spec_backends):
        errors.update(option_errors(backend_owner(kind), values))
    return errors


def spec_part(owner: OptionOwner, values: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    """``part`` with ``owner``'s collected values set at their paths (unset ones left out)."""
    for option in owner.fields:
        value = values.get(option.path)
        if value is not None:
            set_dotted_lenient(part, option.path, value)
    return part


def workload_part(kind: str, values: dict[str, Any], *, stream: bool) -> dict[str, Any]:
    """The spec's ``workload`` part from a form's option values (unset uploads left out)."""
    return spec_part(workload_owner(kind), values, {"kind": kind, "stream": stream})


def backend_sections(spec_backends: list[str], values: dict[str, Any]) -> dict[str, Any]:
    """The run spec's option sections (``{"vllm": {...}}``) of the kinds behind
    ``spec_backends``, from a form's option values."""
    sections: dict[str, Any] = {}
    for kind in backend_kinds(spec_backends):
        spec_part(backend_owner(kind), values, sections)
    return sections


def settable_options() -> list[str]:
    """Every option a registered kind declares, as ``--set`` keys: ``workload.prompts
    (number-story)``, ``vllm.block_size``..."""
    keys: dict[str, list[str]] = {}
    for name in workloads.workload_names():
        for option in workload_owner(name).fields:
            keys.setdefault(f"workload.{option.path}", []).append(name)
    named = [f"{key} ({', '.join(kinds)})" for key, kinds in keys.items()]
    for name in backends.backend_names():
        named.extend(option.path for option in backend_owner(name).fields)
    return named
