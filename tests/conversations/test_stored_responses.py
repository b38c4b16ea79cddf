"""The stored turns of Responses conversations: written by the outbox's ingest once, encrypted,
read back by organization only, and deleted with the organization's retention."""

from dataclasses import replace
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from apps.conversations import services
from apps.conversations.models import StoredResponse
from apps.conversations.turns import StoredTurn, seal
from apps.organizations.services import organization_delete

pytestmark = pytest.mark.django_db(transaction=True)


def turn(organization, response_id="resp_1", *, days_ago=0, text="the secret is tangerine"):
    return StoredTurn(
        response_id=response_id,
        organization_id=str(organization.id),
        native=False,
        model="fast",
        created_at=timezone.now() - timedelta(days=days_ago),
        input=[{"role": "user", "content": text}],
        output=[{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
        response={"id": response_id, "object": "response"},
    )


def test_a_batch_written_twice_keeps_one_row_and_reads_back_decrypted(organization):
    payload = seal(turn(organization))

    services.stored_responses_write([payload])
    services.stored_responses_write([payload])

    row = StoredResponse.objects.get()
    assert "tangerine" not in row.content_encrypted
    found = async_to_sync(services.recall)(str(organization.id), ["resp_1"], team_id=None)
    assert found["resp_1"].input == [{"role": "user", "content": "the secret is tangerine"}]
    assert found["resp_1"].response == {"id": "resp_1", "object": "response"}


def test_another_organizations_turn_is_not_found(organization, outsider):
    services.stored_responses_write([seal(turn(organization))])

    assert async_to_sync(services.recall)(str(outsider.organization.id), ["resp_1"], team_id=None) == {}
    assert async_to_sync(services.recall)(str(organization.id), ["resp_1"], team_id=None) != {}


def test_a_turn_of_an_organization_deleted_since_is_passed_over(organization, outsider):
    gone = outsider.organization
    payloads = [seal(turn(organization)), seal(turn(gone, "resp_2"))]
    organization_delete(organization=gone)

    services.stored_responses_write(payloads)

    assert list(StoredResponse.objects.values_list("response_id", flat=True)) == ["resp_1"]


def test_retention_deletes_the_turns_older_than_the_organizations_log_retention(organization):
    organization.log_retention_days = 7
    organization.save(update_fields=["log_retention_days"])
    services.stored_responses_write(
        [seal(turn(organization, "resp_old", days_ago=8)), seal(turn(organization))]
    )

    deleted = services.stored_responses_retention_apply()

    assert deleted == {str(organization.id): 1}
    assert list(StoredResponse.objects.values_list("response_id", flat=True)) == ["resp_1"]


def test_a_turn_no_configured_key_decrypts_is_left_out(organization, settings):
    services.stored_responses_write([seal(turn(organization))])
    from apps.core import crypto

    original = settings.GATEWAY_ENCRYPTION_KEYS
    settings.GATEWAY_ENCRYPTION_KEYS = ["ZmRmZGZkZmRmZGZkZmRmZGZkZmRmZGZkZmRmZGZkZmQ="]
    crypto.forget_keys()
    try:
        assert async_to_sync(services.recall)(str(organization.id), ["resp_1"], team_id=None) == {}
    finally:
        settings.GATEWAY_ENCRYPTION_KEYS = original
        crypto.forget_keys()


def test_a_turn_is_found_by_requests_for_its_own_team_only(organization):
    team_id = "0b9d6d8e-8c5e-4c8a-9d0e-0d6f5b0c1a2b"
    services.stored_responses_write([seal(replace(turn(organization), team_id=team_id))])

    recall = async_to_sync(services.recall)
    assert recall(str(organization.id), ["resp_1"], team_id=team_id).keys() == {"resp_1"}
    assert recall(str(organization.id), ["resp_1"], team_id=None) == {}


def test_a_deleted_turn_stays_deleted_when_its_write_comes_late(organization):
    made = turn(organization)

    async_to_sync(services.forget)(made)  # before the ingest has written it
    services.stored_responses_write([seal(made)])

    row = StoredResponse.objects.get()
    assert row.deleted and row.content_encrypted == ""
    assert async_to_sync(services.recall)(str(organization.id), ["resp_1"], team_id=None) == {}
