"""POST /api/v1/feedback: with the API key that made the request, or a session of its organization;
one per request, updatable; another organization's request, another key's or an unknown one: the
answer a request not ingested yet gets (202 pending), and never recorded."""

import uuid

import pytest
from rest_framework.test import APIClient

from apps.experiments.models import Feedback, PendingFeedback
from tests.audit.entries import AuditEntryFactory
from tests.factories import create_api_key

URL = "/api/v1/feedback"


def key_client(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


@pytest.fixture
def request_entry(organization, api_key):
    return AuditEntryFactory(organization=organization, api_key_id=api_key[0].id)


def test_the_key_that_made_the_request_gives_feedback_and_a_second_post_updates_it(api_key, request_entry):
    client = key_client(api_key[1])
    first = client.post(
        URL, {"request_id": str(request_entry.id), "score": 1, "comment": "good"}, format="json"
    )
    assert first.status_code == 201, first.content
    assert first.json()["score"] == 1.0 and first.json()["api_key_id"] == str(api_key[0].id)
    second = client.post(URL, {"request_id": str(request_entry.id), "label": "too long"}, format="json")
    assert second.status_code == 200
    assert second.json()["id"] == first.json()["id"]
    feedback = Feedback.objects.get()
    assert (feedback.score, feedback.label, feedback.comment) == (1.0, "too long", "good")


def test_a_member_of_the_organization_gives_feedback_with_a_session(client_for, organization, request_entry):
    response = client_for(organization, "member").post(
        URL, {"request_id": str(request_entry.id), "score": -0.5}, format="json"
    )
    assert response.status_code == 201 and response.json()["user"] is not None


def test_another_organizations_request_gets_the_answer_an_unknown_id_gets_and_is_never_recorded(
    client_for, outsider, request_entry
):
    _, their_secret = create_api_key(outsider.organization)
    unknown = key_client(their_secret).post(URL, {"request_id": str(uuid.uuid4()), "score": 1}, format="json")
    for client in (key_client(their_secret), client_for(outsider.organization, "owner")):
        response = client.post(URL, {"request_id": str(request_entry.id), "score": 1}, format="json")
        assert (
            (response.status_code, response.json()["status"])
            == (unknown.status_code, "pending")
            == (202, "pending")
        )
    assert not Feedback.objects.exists()
    # Dropped at once: the entry is written and is not theirs.
    assert not PendingFeedback.objects.filter(request_id=request_entry.id).exists()


def test_another_key_of_the_same_organization_gets_the_answer_an_unknown_id_gets(organization, request_entry):
    _, other_secret = create_api_key(organization, name="other")
    client = key_client(other_secret)
    theirs = client.post(URL, {"request_id": str(request_entry.id), "score": 1}, format="json")
    unknown = client.post(URL, {"request_id": str(uuid.uuid4()), "score": 1}, format="json")
    assert theirs.status_code == unknown.status_code == 202
    assert theirs.json().keys() == unknown.json().keys()
    assert not Feedback.objects.exists()


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"comment": "no score nor label"},
        {"score": "1"},
        {"score": True},
        {"score": 1e300},
        {"label": "x" * 101},
        {"comment": "x" * 5001, "score": 1},
    ],
)
def test_bad_feedback_is_refused(api_key, request_entry, values):
    response = key_client(api_key[1]).post(
        URL, {"request_id": str(request_entry.id), **values}, format="json"
    )
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "validation_error"


@pytest.mark.parametrize("request_id", [0, False, 1.5, ["x"]])
def test_a_request_id_that_is_not_a_uuid_string_is_refused(api_key, request_entry, request_id):
    """DRF's UUIDField takes a number as UUID(int=...): ``false`` was stored against UUID 0."""
    response = key_client(api_key[1]).post(URL, {"request_id": request_id, "score": 1}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["fields"].keys() == {"request_id"}


def test_a_nan_score_is_refused(api_key, request_entry):
    body = '{"request_id": "' + str(request_entry.id) + '", "score": NaN}'
    response = key_client(api_key[1]).post(URL, body, content_type="application/json")
    assert response.status_code == 400


def test_a_revoked_or_unknown_key_and_no_credentials_are_refused(api_key, request_entry):
    from apps.keys.services import api_key_revoke

    assert (
        APIClient().post(URL, {"request_id": str(request_entry.id), "score": 1}, format="json").status_code
        == 401
    )
    bad = key_client("sk_live_" + "x" * 43).post(
        URL, {"request_id": str(request_entry.id), "score": 1}, format="json"
    )
    assert bad.status_code == 401
    api_key_revoke(api_key=api_key[0])
    revoked = key_client(api_key[1]).post(
        URL, {"request_id": str(request_entry.id), "score": 1}, format="json"
    )
    assert revoked.status_code == 401


def test_api_keys_still_cannot_use_the_rest_of_the_management_api(api_key):
    assert key_client(api_key[1]).get("/api/v1/experiments").status_code == 401
