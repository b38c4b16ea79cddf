"""Writes of prompt templates, versions and labels. Every value is checked here (the API and the
admin both write through these), so that nothing reaches the proxy that cannot compile; every write
bumps the organization's configuration generation, so each proxy worker reloads its templates (a
label move reaches every process on its next request)."""

import json
import math
import re
import uuid
from collections.abc import Mapping

from django.db import IntegrityError, transaction
from django.db.models import Max

from apps.core.api.serializers import validated
from apps.core.errors import Conflict, invalid_fields
from apps.core.generations import bump_generation
from apps.core.unique import name_taken, save_unique
from apps.organizations.models import Organization

from .compiled import LATEST
from .inputs import (
    DEFAULT_PARAMETERS,
    MODEL_LENGTH,
    TOOLS_LIMIT,
    VALUE_LENGTH,
    TemplateInputSerializer,
    VersionCreateSerializer,
)
from .models import PromptLabel, PromptLabelMove, PromptTemplate, PromptVersion
from .rendering import TemplateSyntaxError, compile_text, value_text

# Labels start with a letter: a version given as a string of digits ("2", as OpenAI's SDK sends
# it) is a number, never a label.
LABEL_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,63}")
_JSON_LENGTH = 200_000
_VERSION_ATTEMPTS = 5


# --- Templates -------------------------------------------------------------------------------------


def template_create(*, organization: Organization, data: Mapping) -> PromptTemplate:
    """``data``: the template as the API's body has it (inputs.py ``TemplateInputSerializer``)."""
    template = PromptTemplate(organization=organization)
    _apply_template(template, {"description": "", **validated(TemplateInputSerializer, data)})
    return _save_template(template, create=True)


def template_update(*, template: PromptTemplate, data: Mapping) -> PromptTemplate:
    """``data``: any of ``slug``, ``name``, ``description``, as the API's PATCH body has them. A new
    slug is what clients must send from then on (the id keeps working)."""
    _apply_template(template, validated(TemplateInputSerializer, data, partial=True))
    return _save_template(template, create=False)


def template_delete(*, template: PromptTemplate) -> None:
    """Deletes the template with its versions, labels and label history."""
    organization_id = template.organization_id
    with transaction.atomic():
        template.delete()
        bump_generation(organization_id)


def _apply_template(template: PromptTemplate, values: Mapping) -> None:
    """``values`` parsed (inputs.py): a slug that is no UUID, since requests name a template by either."""
    if "slug" in values:
        try:
            uuid.UUID(values["slug"])
        except ValueError:
            pass
        else:
            message = "May not be a UUID: templates are named by their id or their slug."
            raise invalid_fields({"slug": [message]})
    for field, value in values.items():
        setattr(template, field, value)


def _save_template(template: PromptTemplate, *, create: bool) -> PromptTemplate:
    taken = PromptTemplate.objects.filter(organization_id=template.organization_id, slug=template.slug)
    if not create:
        taken = taken.exclude(pk=template.pk)

    def write() -> None:
        template.save()
        bump_generation(template.organization_id)

    save_unique(taken=taken, conflict=_slug_taken(template.slug), write=write)
    return template


def _slug_taken(slug: str) -> Conflict:
    return name_taken("A prompt template", "slug", slug, code="prompt_slug_taken")


# --- Versions --------------------------------------------------------------------------------------


def version_create(
    *, template: PromptTemplate, data: Mapping, created_by=None, label: str | None = None
) -> PromptVersion:
    """The template's next version (numbered from 1). ``data``, unchecked (the API's body as it
    came, inputs.py): ``messages``, ``variables``?, ``defaults``?, ``note``?. Refused (400
    ``validation_error``, the field and the position named) for a bad shape, if a content is not a
    valid template, if the variables the messages use and the declared ones differ, or if a default
    is not one of ``DEFAULT_PARAMETERS`` of its type. Versions are never updated.

    ``label``: also publishes the version, pointing that label at it (``label_set``, the move
    recorded with ``created_by``) in the same transaction, so a refused label saves no version."""
    checked = _checked_version(validated(VersionCreateSerializer, data))
    if label is not None:
        _label_name(label)
    for attempt in range(_VERSION_ATTEMPTS):
        try:
            with transaction.atomic():
                # Locks the template's row (PostgreSQL): concurrent versions of one template queue
                # here, so each reads the number the previous one wrote. The unique constraint
                # (and the retry) covers databases without row locks.
                PromptTemplate.objects.select_for_update().filter(pk=template.pk).exists()
                newest = template.versions.aggregate(newest=Max("number"))["newest"] or 0
                version = PromptVersion.objects.create(
                    template=template, number=newest + 1, created_by=created_by, **checked
                )
                if label is not None:
                    label_set(template=template, name=label, version=version, user=created_by)
                bump_generation(template.organization_id)
                return version
        except IntegrityError:
            if attempt == _VERSION_ATTEMPTS - 1:
                raise Conflict(
                    "Other versions of this template were being created at the same time; try again.",
                    code="prompt_version_conflict",
                ) from None
    raise AssertionError("unreachable")


def _checked_version(values: Mapping) -> dict:
    """The version's values (parsed: inputs.py) as they are stored, or ``InvalidRequest`` naming every
    field at fault."""
    errors: dict[str, list[str]] = {}
    checked_messages, used = _messages(values["messages"], errors)
    checked_variables = _variables(values.get("variables", []), errors)
    checked_defaults = _defaults(values.get("defaults", {}), errors)
    if not errors:
        declared = {variable["name"] for variable in checked_variables}
        undeclared = sorted(used - declared)
        unused = sorted(declared - used)
        if undeclared:
            errors.setdefault("variables", []).append(
                f"The messages use {_names(undeclared)}, which {_are(undeclared)} not declared."
            )
        if unused:
            errors.setdefault("variables", []).append(
                f"{_names(unused)} {_are(unused)} declared but not used in the messages."
            )
    if errors:
        raise invalid_fields(errors)
    return {
        "messages": checked_messages,
        "variables": checked_variables,
        "defaults": checked_defaults,
        "note": values.get("note", ""),
    }


def _names(names: list[str]) -> str:
    return ", ".join(f"'{name}'" for name in names)


def _are(names: list[str]) -> str:
    return "are" if len(names) > 1 else "is"


def _messages(messages: list, errors: dict) -> tuple[list[dict], set[str]]:
    """Each content compiled: the variables the messages use."""
    used: set[str] = set()
    checked = []
    for index, message in enumerate(messages):
        try:
            used |= compile_text(message["content"]).variables
        except TemplateSyntaxError as error:
            errors[f"messages[{index}].content"] = [str(error)]
            continue
        checked.append({"role": message["role"], "content": message["content"]})
    return checked, used


def _variables(variables: list, errors: dict) -> list[dict]:
    """Each declared once, with a default that reads as text of at most ``VALUE_LENGTH``."""
    checked, seen = [], set()
    for index, variable in enumerate(variables):
        where = f"variables[{index}]"
        name = variable["name"]
        if name in seen:
            errors[f"{where}.name"] = [f"'{name}' is declared twice."]
            continue
        seen.add(name)
        item = {"name": name}
        if "default" in variable:
            default = variable["default"]
            try:
                text = value_text(default)
            except (TypeError, ValueError):
                errors[f"{where}.default"] = ["A string, a number or a boolean."]
                continue
            if len(text) > VALUE_LENGTH:
                errors[f"{where}.default"] = [f"At most {VALUE_LENGTH} characters."]
                continue
            item["default"] = default
        checked.append(item)
    return checked


def _defaults(value: dict, errors: dict) -> dict:
    checked = {}
    for name, parameter in value.items():
        where = f"defaults.{name}"
        if name not in PARAMETER_CHECKS:
            errors[where] = [
                f"Not a parameter a version may set; those are: {', '.join(DEFAULT_PARAMETERS)}."
            ]
            continue
        try:
            checked[name] = PARAMETER_CHECKS[name](parameter)
        except ValueError as error:
            errors[where] = [str(error)]
    if len(_json_dumps(checked)) > _JSON_LENGTH:
        errors["defaults"] = [f"At most {_JSON_LENGTH} characters as JSON."]
    return checked


def _json_dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def _number(low: float, high: float):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"A number from {low} to {high}.")
        if not low <= value <= high:
            raise ValueError(f"A number from {low} to {high}.")
        return value

    return check


def _whole(low: int, high: int):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"A whole number from {low} to {high}.")
        return value

    return check


def _model(value) -> str:
    if not isinstance(value, str) or not value or len(value) > MODEL_LENGTH or "\x00" in value:
        raise ValueError(f"A model name of 1 to {MODEL_LENGTH} characters.")
    return value


def _stop(value):
    if isinstance(value, str) and value:
        return value
    if (
        isinstance(value, list)
        and 1 <= len(value) <= 4
        and all(isinstance(item, str) and item for item in value)
    ):
        return value
    raise ValueError("A non-empty string or a list of 1 to 4 of them.")


def _object(value):
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ValueError('An object with a "type" string.')
    return value


def _tools(value):
    if not isinstance(value, list) or not 1 <= len(value) <= TOOLS_LIMIT:
        raise ValueError(f"A list of 1 to {TOOLS_LIMIT} tool objects.")
    for tool in value:
        _object(tool)
    return value


def _tool_choice(value):
    if value in ("none", "auto", "required"):
        return value
    if isinstance(value, dict):
        return _object(value)
    raise ValueError('"none", "auto", "required" or an object naming a tool.')


def _boolean(value):
    if not isinstance(value, bool):
        raise ValueError("Must be true or false.")
    return value


def _effort(value):
    if not isinstance(value, str) or not re.fullmatch(r"[a-z]{1,20}", value):
        raise ValueError("A word such as low, medium or high.")
    return value


# What each default must be; the experiments' variant parameters are checked with the same.
PARAMETER_CHECKS = {
    "model": _model,
    "temperature": _number(0, 2),
    "top_p": _number(0, 1),
    "max_tokens": _whole(1, 10_000_000),
    "max_completion_tokens": _whole(1, 10_000_000),
    "frequency_penalty": _number(-2, 2),
    "presence_penalty": _number(-2, 2),
    "stop": _stop,
    "seed": _whole(-(2**63), 2**63 - 1),
    "response_format": _object,
    "tools": _tools,
    "tool_choice": _tool_choice,
    "parallel_tool_calls": _boolean,
    "reasoning_effort": _effort,
}
assert tuple(PARAMETER_CHECKS) == DEFAULT_PARAMETERS


# --- Labels ----------------------------------------------------------------------------------------


def label_set(*, template: PromptTemplate, name: str, version, user=None) -> PromptLabel:
    """Points the label ``name`` of ``template`` at ``version`` (a number of the template, or one of
    its ``PromptVersion``s), creating the label or moving it, and records the move with ``user``.
    A version of another template is refused like one that does not exist. Setting a label where
    it already points records nothing and bumps nothing."""
    _label_name(name)
    target = _version_of(template, version)
    with transaction.atomic():
        label = (
            PromptLabel.objects.select_for_update()
            .filter(template=template, name=name)
            .select_related("version")
        ).first()
        if label is not None and label.version_id == target.pk:
            return label
        previous = label.version.number if label is not None else None
        if label is None:
            try:
                with transaction.atomic():
                    label = PromptLabel.objects.create(template=template, name=name, version=target)
            except IntegrityError as error:  # set by a concurrent request: it won
                raise Conflict(
                    f"The label '{name}' was being set at the same time; try again.",
                    code="prompt_label_conflict",
                ) from error
        else:
            label.version = target
            label.save(update_fields=["version", "updated_at"])
        PromptLabelMove.objects.create(
            template=template, label=name, from_version=previous, to_version=target.number, moved_by=user
        )
        bump_generation(template.organization_id)
    return label


def label_delete(*, label: PromptLabel, user=None) -> None:
    """Removes the label (requests naming it then answer ``prompt_not_found``) and records it."""
    with transaction.atomic():
        PromptLabelMove.objects.create(
            template_id=label.template_id,
            label=label.name,
            from_version=label.version.number,
            to_version=None,
            moved_by=user,
        )
        label.delete()
        bump_generation(label.template.organization_id)


def _label_name(name) -> None:
    if not isinstance(name, str) or not LABEL_PATTERN.fullmatch(name):
        raise invalid_fields(
            {
                "label": [
                    "Lowercase letters, digits, '-' and '_', starting with a letter, at most 64 characters."
                ]
            }
        )
    if name == LATEST:
        raise invalid_fields({"label": ["'latest' always means the newest version; it cannot be set."]})


def _version_of(template: PromptTemplate, version) -> PromptVersion:
    if isinstance(version, PromptVersion):
        if version.template_id == template.pk:
            return version
        number = None
    elif isinstance(version, int) and not isinstance(version, bool):
        number = version
    else:
        raise invalid_fields({"version": ["A version number."]})
    found = template.versions.filter(number=number).first() if number is not None else None
    if found is None:
        which = f"version {number}" if number is not None else "such version"
        raise invalid_fields({"version": [f"This template has no {which}."]})
    return found
