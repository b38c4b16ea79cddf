"""Prompt templates on the hot path: pure Python over plain data, no database.

``selectors.prompt_snapshots(organization_id)`` builds a ``PromptCatalog`` once per configuration
generation of an organization (every version's messages compiled into literal pieces and names);
``render_request(catalog, prompt)`` resolves the body's ``prompt`` object against it and renders,
and ``apply_to_body(body, rendered)`` merges the result into the request: the rendered messages
first, then the client's, and the version's defaults only for parameters the client did not send.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass

from apps.core.errors import InvalidRequest

from .rendering import CompiledText, compile_text, value_text

DEFAULT_LABEL = "production"
LATEST = "latest"
_REFERENCE_LENGTH = 200
_PROMPT_KEYS = frozenset(("id", "version", "variables"))
# A client that sends one of a group sends the group: a template's max_tokens must not join the
# client's max_completion_tokens, nor its tool_choice or parallel_tool_calls the client's own tools.
_PARAMETER_GROUPS = {
    "max_tokens": ("max_tokens", "max_completion_tokens"),
    "max_completion_tokens": ("max_tokens", "max_completion_tokens"),
    "tools": ("tools",),
    "tool_choice": ("tools", "tool_choice"),
    "parallel_tool_calls": ("tools", "parallel_tool_calls"),
}


class InvalidPrompt(InvalidRequest):
    """The body's ``prompt`` is not an object of the documented shape."""

    code = "invalid_prompt"


class PromptNotFound(InvalidRequest):
    """No such template in the organization, or no such version or label of it."""

    code = "prompt_not_found"


class PromptVariableMissing(InvalidRequest):
    code = "prompt_variable_missing"


class PromptVariableUnknown(InvalidRequest):
    code = "prompt_variable_unknown"


@dataclass(frozen=True, slots=True)
class VersionSnapshot:
    number: int
    # (role, compiled content) per message, in order.
    messages: tuple[tuple[str, CompiledText], ...]
    # Declared names in their order, and the text of the defaults of those that have one.
    variables: tuple[str, ...]
    variable_defaults: Mapping[str, str]
    # Scalar defaults shared as they are; list and object ones as JSON, decoded per request so that
    # no two requests share (and could change) one object.
    scalar_defaults: Mapping[str, object]
    nested_defaults_json: str | None

    @property
    def defaults(self) -> dict:
        defaults = dict(self.scalar_defaults)
        if self.nested_defaults_json is not None:
            defaults.update(json.loads(self.nested_defaults_json))
        return defaults


@dataclass(frozen=True, slots=True)
class TemplateSnapshot:
    id: str
    slug: str
    versions: Mapping[int, VersionSnapshot]
    labels: Mapping[str, int]  # label name -> version number
    latest: int | None  # the newest version's number; None for a template without versions


@dataclass(frozen=True, slots=True)
class PromptCatalog:
    """An organization's templates, by slug and by id (canonical lowercase UUID string)."""

    by_slug: Mapping[str, TemplateSnapshot]
    by_id: Mapping[str, TemplateSnapshot]

    def find(self, reference: str) -> TemplateSnapshot | None:
        return self.by_slug.get(reference) or self.by_id.get(reference.lower())


EMPTY_CATALOG = PromptCatalog(by_slug={}, by_id={})


@dataclass(frozen=True, slots=True)
class Rendered:
    messages: list[dict]
    defaults: dict
    template_id: str
    slug: str
    version: int
    label: str | None  # the label the client named (or production by default); None for a number


def version_snapshot(*, number: int, messages, variables, defaults) -> VersionSnapshot:
    """From a stored version's values (already checked by the services)."""
    scalar = {name: value for name, value in defaults.items() if not isinstance(value, dict | list)}
    nested = {name: value for name, value in defaults.items() if isinstance(value, dict | list)}
    return VersionSnapshot(
        number=number,
        messages=tuple((message["role"], compile_text(message["content"])) for message in messages),
        variables=tuple(variable["name"] for variable in variables),
        variable_defaults={
            variable["name"]: value_text(variable["default"])
            for variable in variables
            if "default" in variable
        },
        scalar_defaults=scalar,
        nested_defaults_json=json.dumps(nested) if nested else None,
    )


def render_request(catalog: PromptCatalog, prompt) -> Rendered:
    """Renders the ``prompt`` object of a chat completions body: ``{"id": <slug or id>, "version":
    <number, digits or label; default "production">, "variables": {...}}``. Raises ``InvalidPrompt``,
    ``PromptNotFound``, ``PromptVariableUnknown`` or ``PromptVariableMissing`` (all 400)."""
    if not isinstance(prompt, dict):
        raise InvalidPrompt("'prompt' must be an object with an 'id'.", param="prompt")
    if not prompt.keys() <= _PROMPT_KEYS:
        unknown = sorted(str(key) for key in prompt.keys() - _PROMPT_KEYS)
        raise InvalidPrompt(
            f"Unknown field {', '.join(repr(key) for key in unknown)} in 'prompt': it takes id, version and "
            "variables.",
            param="prompt",
        )
    reference = prompt.get("id")
    if not isinstance(reference, str) or not reference or len(reference) > _REFERENCE_LENGTH:
        raise InvalidPrompt("'prompt.id' must be a template's slug or id.", param="prompt.id")
    template = catalog.find(reference)
    if template is None:
        raise PromptNotFound(f"No prompt template '{reference}' in this organization.", param="prompt.id")
    number, label = _version(template, prompt.get("version"))
    version = template.versions[number]
    values = _values(version, prompt.get("variables"))
    return Rendered(
        messages=[{"role": role, "content": content.render(values)} for role, content in version.messages],
        defaults=version.defaults,
        template_id=template.id,
        slug=template.slug,
        version=number,
        label=label,
    )


def _version(template: TemplateSnapshot, requested) -> tuple[int, str | None]:
    if requested is None:
        requested = DEFAULT_LABEL
    if isinstance(requested, int) and not isinstance(requested, bool):
        number = requested
    elif isinstance(requested, str) and requested.isascii() and requested.isdigit() and len(requested) < 10:
        number = int(requested)
    elif isinstance(requested, str) and 0 < len(requested) <= 64:
        if requested == LATEST and template.latest is not None:
            return template.latest, LATEST
        number = template.labels.get(requested)
        if number is None:
            raise PromptNotFound(
                f"The prompt template '{template.slug}' has no label '{requested}'.", param="prompt.version"
            )
        return number, requested
    else:
        raise InvalidPrompt(
            "'prompt.version' must be a version number or a label such as \"production\".",
            param="prompt.version",
        )
    if number not in template.versions:
        raise PromptNotFound(
            f"The prompt template '{template.slug}' has no version {number}.", param="prompt.version"
        )
    return number, None


def _values(version: VersionSnapshot, given) -> dict[str, str]:
    if given is None:
        given = {}
    elif not isinstance(given, dict):
        raise InvalidPrompt("'prompt.variables' must be an object.", param="prompt.variables")
    declared = version.variable_defaults
    unknown = [name for name in given if name not in version.variables]
    if unknown:
        raise PromptVariableUnknown(
            f"Unknown variable{'s' if len(unknown) > 1 else ''} {_names(unknown)} for version "
            f"{version.number}; it declares {_names(version.variables) or 'none'}.",
            param=f"prompt.variables.{unknown[0]}",
        )
    values = dict(declared)
    for name, value in given.items():
        try:
            values[name] = value_text(value)
        except (TypeError, ValueError):
            raise InvalidPrompt(
                f"The variable '{name}' must be a string, a number or a boolean.",
                param=f"prompt.variables.{name}",
            ) from None
    if len(values) != len(version.variables):
        missing = [name for name in version.variables if name not in values]
        raise PromptVariableMissing(
            f"Missing variable{'s' if len(missing) > 1 else ''} {_names(missing)} (no value and no default).",
            param=f"prompt.variables.{missing[0]}",
        )
    return values


def _names(names) -> str:
    return ", ".join(f"'{name}'" for name in names)


def apply_to_body(body: dict, rendered: Rendered) -> dict:
    """A new body: ``prompt`` removed, the rendered messages before the client's ``messages``, and
    each of the version's defaults where the client sent no such parameter (present, even null,
    counts as sent; see ``_PARAMETER_GROUPS``)."""
    merged = {key: value for key, value in body.items() if key != "prompt"}
    own = body.get("messages")
    if own is None:
        merged["messages"] = rendered.messages
    elif isinstance(own, list):
        merged["messages"] = rendered.messages + own
    else:
        raise InvalidRequest("'messages' must be an array.", param="messages")
    for name, value in rendered.defaults.items():
        group = _PARAMETER_GROUPS.get(name)
        if group is None:
            if name not in body:
                merged[name] = value
        elif not any(member in body for member in group):
            merged[name] = value
    return merged
