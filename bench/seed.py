"""Creates (or deletes) what the benchmark needs in the gateway's database.

Run with DJANGO_SETTINGS_MODULE=gateway_project.settings, after ``manage.py migrate``:

    python -m bench.seed create --upstream http://127.0.0.1:9001/v1   # prints JSON
    python -m bench.seed delete <organization id>

``create`` makes an organization, an API key, an "openai" provider key pointing at the stand-in
upstream and the ``bench-model`` alias, through the same services the management API uses, and
prints the organization's id and the API key's secret as one JSON line. An "anthropic" provider key
points at the same stand-in (its base URL without /v1) and serves the ``bench-claude`` alias: the
Responses and Messages cases reach each API natively through one alias and bridged through the
other (``bench-model`` answers Responses natively and Messages over chat completions; ``bench-claude``
answers Messages natively and Responses over Anthropic's Messages API). A second key carries a
budget and rate limits (too large to refuse anything, so every request is checked and charged):
the case that measures what admission adds. A third carries ten policies (scoped to it): the case
that measures what the policies add. A prompt template renders to the benchmark's request: the
case that measures what rendering adds.
"""

import argparse
import json
import secrets
import sys
from decimal import Decimal

import django

ALIAS = "bench-model"
ANTHROPIC_ALIAS = "bench-claude"
# Renders to the benchmark's own request: the templated case differs from the plain one by the rendering.
TEMPLATE = "bench-hello"
UPSTREAM_MODEL = "gpt-4o-mini"
ANTHROPIC_UPSTREAM_MODEL = "claude-haiku-4-5"  # in the shipped price list, as gpt-4o-mini is


def create(upstream: str) -> dict[str, str]:
    from apps.catalog.services import model_alias_create
    from apps.keys.services import api_key_create
    from apps.limits.services import limits_set
    from apps.organizations.models import Organization
    from apps.policies.services import policy_create
    from apps.prompts.services import label_set, template_create, version_create
    from apps.providers.services import provider_key_create

    # A fresh organization each run: on a shared database (DATABASE_URL) nothing clashes.
    suffix = secrets.token_hex(4)
    organization = Organization.objects.create(name=f"Benchmark {suffix}", slug=f"bench-{suffix}")
    _, secret = api_key_create(organization=organization, data={"name": "bench"})
    provider_key_create(
        organization=organization,
        data={"provider": "openai", "key": "sk-bench-upstream", "base_url": upstream, "data_region": "us"},
    )
    model_alias_create(
        organization=organization,
        data={"alias": ALIAS, "deployments": [{"provider": "openai", "upstream_model": UPSTREAM_MODEL}]},
    )
    provider_key_create(
        organization=organization,
        data={
            "provider": "anthropic",
            "key": "sk-ant-bench-upstream",
            "base_url": upstream.removesuffix("/v1"),
            "data_region": "us",
        },
    )
    model_alias_create(
        organization=organization,
        data={
            "alias": ANTHROPIC_ALIAS,
            "deployments": [{"provider": "anthropic", "upstream_model": ANTHROPIC_UPSTREAM_MODEL}],
        },
    )
    limited, limited_secret = api_key_create(organization=organization, data={"name": "bench with limits"})
    limits_set(
        organization=organization,
        api_key=limited,
        budget={"amount_usd": Decimal("99999999"), "period": "monthly"},
        rate_limits={"rpm": 1_000_000_000, "tpm": 1_000_000_000},
    )
    policed, policed_secret = api_key_create(organization=organization, data={"name": "bench with policies"})
    for policy in ten_policies():
        policy_create(organization=organization, data={**policy, "scope": {"api_keys": [str(policed.id)]}})
    template = template_create(organization=organization, data={"slug": TEMPLATE, "name": "Bench"})
    version_create(
        template=template,
        data={
            "messages": [{"role": "user", "content": "Say {{what}} in a few words."}],
            "variables": [{"name": "what"}],
            "defaults": {"max_tokens": 16},
        },
    )
    label_set(template=template, name="production", version=1)
    return {
        "organization_id": str(organization.id),
        "api_key": secret,
        "limited_api_key": limited_secret,
        "policed_api_key": policed_secret,
        "model": ALIAS,
        "anthropic_model": ANTHROPIC_ALIAS,
        "template": TEMPLATE,
    }


def ten_policies() -> list[dict]:
    """What an organization might run: redaction of every detector, a few custom patterns and
    denied terms, flags, a size limit; none of them blocks the benchmark's prompt."""
    return [
        {"name": "personal data", "action": "redact", "detectors": ["email", "phone", "us_ssn"]},
        {"name": "payment data", "action": "redact", "detectors": ["payment_card", "iban"]},
        {"name": "credentials", "action": "redact", "detectors": ["secret"], "apply_to_response": True},
        {"name": "addresses", "action": "flag", "detectors": ["ip_address"]},
        {
            "name": "internal ids",
            "action": "redact",
            "patterns": [r"\bEMP-\d{6}\b", r"\bTICKET-[A-Z]{3}-\d+\b"],
        },
        {"name": "code names", "action": "block", "terms": ["project falcon", "operation nightjar"]},
        {"name": "competitors", "action": "flag", "terms": ["acme corp", "globex", "initech"]},
        {"name": "size", "action": "block", "max_prompt_chars": 100_000},
        {"name": "no old models", "action": "block", "denied_models": ["gpt-3.5-turbo"]},
        {"name": "hostnames", "action": "flag", "patterns": [r"\b[a-z0-9-]+\.internal\.example\b"]},
    ]


def delete(organization_id: str) -> None:
    from apps.core.generations import generation_key
    from apps.core.redis import sync_client
    from apps.organizations.models import Organization

    Organization.objects.filter(pk=organization_id).delete()  # keys and aliases cascade
    client = sync_client()
    if client is not None:  # the organization's configuration counter, on a shared Redis
        client.delete(generation_key(organization_id))


def main() -> None:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("create").add_argument("--upstream", required=True)
    commands.add_parser("delete").add_argument("organization_id")
    args = parser.parse_args()
    django.setup()
    if args.command == "create":
        print(json.dumps(create(args.upstream)))
    else:
        delete(args.organization_id)


if __name__ == "__main__":
    sys.exit(main())
