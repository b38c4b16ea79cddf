"""Feedback on a request that is on the spool but not in the audit log yet, through the real outbox
(the record spooled as the proxy spools it, the ingest run by ``flush``): it waits (202) and is
attached when the entry is written, in the order it was sent, to the giver's request only; what
never finds its request is dropped after GATEWAY_FEEDBACK_PENDING_SECONDS by the minute's sweep."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from apps.audit.records import RequestRecord
from apps.audit.services import KIND
from apps.experiments.models import Feedback, PendingFeedback
from apps.experiments.tasks import sweep_pending_feedback
from apps.outbox.outbox import outbox
from tests.audit.entries import AuditEntryFactory
from tests.experiments.test_feedback import URL, key_client
from tests.factories import create_api_key

pytestmark = pytest.mark.django_db(transaction=True)


def spooled_request(organization, api_key) -> str:
    """A request the gateway answered for ``api_key``: its record on the spool, as the proxy leaves it."""
    request_id = str(uuid.uuid4())
    outbox().put(
        KIND,
        RequestRecord(
            request_id=request_id,
            started_at=datetime.now(UTC),
            endpoint="/v1/chat/completions",
            client_ip="127.0.0.1",
            user_agent="",
            organization_id=str(organization.id),
            api_key_id=str(api_key.id),
            requested_model="fast",
        ),
    )
    return request_id


def test_feedback_waits_for_the_entry_and_is_attached_in_the_order_it_was_sent(
    organization, api_key, client_for, outsider
):
    request_id = spooled_request(organization, api_key[0])
    client = key_client(api_key[1])
    posts = [
        {"score": 1, "label": "good"},
        {"score": -1},  # the user changed their mind: the later score wins
        {"comment": "on reflection"},
    ]
    for values in posts:
        response = client.post(URL, {"request_id": request_id, **values}, format="json")
        assert response.status_code == 202, response.content
        assert response.json()["status"] == "pending"
    # Others' posts on it, before the entry exists: accepted alike, never attached.
    _, other_secret = create_api_key(organization, name="other")
    _, their_secret = create_api_key(outsider.organization)
    for stranger in (
        key_client(other_secret),
        key_client(their_secret),
        client_for(outsider.organization, "owner"),
    ):
        assert (
            stranger.post(URL, {"request_id": request_id, "label": "bad"}, format="json").status_code == 202
        )
    assert not Feedback.objects.exists()

    assert outbox().flush()

    feedback = Feedback.objects.get()
    assert (str(feedback.request_id), feedback.score, feedback.label, feedback.comment) == (
        request_id,
        -1.0,
        "good",
        "on reflection",
    )
    assert str(feedback.api_key_id) == str(api_key[0].id)
    assert not PendingFeedback.objects.exists()


def test_a_member_s_session_feedback_waits_too(organization, api_key, client_for):
    request_id = spooled_request(organization, api_key[0])
    response = client_for(organization, "member").post(
        URL, {"request_id": request_id, "score": 0.5}, format="json"
    )
    assert response.status_code == 202
    assert outbox().flush()
    assert Feedback.objects.get().user is not None


def test_a_first_post_with_a_comment_alone_is_refused_while_the_request_waits(organization, api_key):
    request_id = spooled_request(organization, api_key[0])
    response = key_client(api_key[1]).post(URL, {"request_id": request_id, "comment": "hm"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
    assert not PendingFeedback.objects.exists()


def test_an_organization_has_a_bound_on_waiting_feedback(organization, api_key, outsider, settings):
    settings.GATEWAY_FEEDBACK_PENDING_MAX = 2
    client = key_client(api_key[1])
    for _ in range(2):
        assert (
            client.post(URL, {"request_id": str(uuid.uuid4()), "score": 1}, format="json").status_code == 202
        )
    refused = client.post(URL, {"request_id": str(uuid.uuid4()), "score": 1}, format="json")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "feedback_pending_limit"
    # Another organization's bound is its own.
    _, their_secret = create_api_key(outsider.organization)
    assert (
        key_client(their_secret)
        .post(URL, {"request_id": str(uuid.uuid4()), "score": 1}, format="json")
        .status_code
        == 202
    )


def test_the_sweep_attaches_what_the_ingest_missed_and_drops_what_never_finds_its_request(
    organization, api_key, time_machine, settings
):
    client = key_client(api_key[1])
    time_machine.move_to(datetime(2026, 11, 27, 12, tzinfo=UTC), tick=False)
    never_answered = str(uuid.uuid4())
    assert client.post(URL, {"request_id": never_answered, "score": 1}, format="json").status_code == 202
    written_later = str(uuid.uuid4())
    assert client.post(URL, {"request_id": written_later, "score": 1}, format="json").status_code == 202
    # An entry written without the ingest's listener (as after a failure once the batch committed).
    AuditEntryFactory(id=written_later, organization=organization, api_key_id=api_key[0].id)

    time_machine.move_to(datetime(2026, 11, 27, 12, 1, tzinfo=UTC), tick=False)
    assert sweep_pending_feedback() == {"attached": 1, "expired": 0}
    assert [str(f.request_id) for f in Feedback.objects.all()] == [written_later]
    assert PendingFeedback.objects.get().request_id == uuid.UUID(never_answered)

    time_machine.move_to(
        datetime(2026, 11, 27, 12, tzinfo=UTC)
        + timedelta(seconds=settings.GATEWAY_FEEDBACK_PENDING_SECONDS + 1),
        tick=False,
    )
    assert sweep_pending_feedback() == {"attached": 0, "expired": 1}
    assert not PendingFeedback.objects.exists()
