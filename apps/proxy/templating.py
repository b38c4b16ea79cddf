"""Prompt templates in the proxy (docs/prompts.md): a chat body that names a stored prompt
(``"prompt": {"id", "version", "variables"}``) is rendered from the configuration held in memory
and merged into the body before anything else sees it.

Before admission, policies and the cache, not as a stage: the rendered body is what a budget
estimates, what the policies check, what the cache keys and stores, and what goes upstream. It is
rendered again with each copy of the configuration admission asks for, so a label moved a moment
ago is what the request gets.
"""

from typing import TYPE_CHECKING, Any

from apps.prompts.compiled import apply_to_body, render_request

from .config import OrganizationConfig
from .http import ProxyRequest

if TYPE_CHECKING:
    from .endpoints import Endpoint


def rendered_body(
    endpoint: "Endpoint", request: ProxyRequest, config: OrganizationConfig, body: dict[str, Any]
) -> dict[str, Any]:
    """The body to serve: ``body`` itself when it names no stored prompt."""
    if not endpoint.templated or "prompt" not in body:
        return body
    rendered = render_request(config.prompts, body["prompt"])
    body = apply_to_body(body, rendered)
    endpoint.validate(body)
    record = request.record
    record.prompt_template_id, record.prompt_template = rendered.template_id, rendered.slug
    record.prompt_version, record.prompt_label = rendered.version, rendered.label
    return body
