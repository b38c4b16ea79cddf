"""Audit entries made directly, for tests of what reads the log (exports, retention): the proxy's
own tests show how entries come to be."""

import uuid
from datetime import UTC, datetime
from decimal import Decimal

import factory

from apps.audit.models import AuditEntry


class AuditEntryFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = AuditEntry

    id = factory.LazyFunction(uuid.uuid4)
    created_at = factory.LazyFunction(lambda: datetime(2025, 6, 1, tzinfo=UTC))
    endpoint = "/v1/chat/completions"
    api_key_id = factory.LazyFunction(uuid.uuid4)
    api_key_prefix = "sk_live_abcd"
    requested_model = "fast"
    provider = "openai"
    model = "gpt-4o-mini"
    status = 200
    attempts = factory.LazyFunction(lambda: [{"provider": "openai", "status": 200, "outcome": "ok"}])
    input_tokens = 12
    output_tokens = 4
    cost_usd = Decimal("0.00000420")
    latency_ms = 12.5
    client_ip = "203.0.113.7"
    user_agent = "pytest-agent"
    body_mode = "full"
    request_body = '{"messages": "secret prompt"}'
    response_body = '{"choices": "secret answer"}'


def bulk_entries(organization, times, **fields) -> list[AuditEntry]:
    """Entries of ``organization`` at each of ``times``, inserted in one statement."""
    entries = [AuditEntryFactory.build(organization=organization, created_at=at, **fields) for at in times]
    return AuditEntry.objects.bulk_create(entries)
