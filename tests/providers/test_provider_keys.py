"""/api/v1/provider-keys: the upstream credentials the gateway holds, encrypted, never shown again."""

import uuid

import pytest

from apps.core import crypto
from apps.core.generations import generation_key, local_generation
from apps.core.redis import sync_client
from apps.providers.models import ProviderKey
from tests.factories import create_provider_key
from tests.management.errors import assert_error
from tests.management.generations import bumps_generation

pytestmark = pytest.mark.django_db

URL = "/api/v1/provider-keys"
SECRET = "sk-proj-upstream-secret-7Qx9"
# Address literals: the suite needs no DNS, and a public address passes the upstream check.
PUBLIC_URL = "https://8.8.8.8/v1"
SHOWN_FIELDS = {
    "id",
    "provider",
    "name",
    "key_hint",
    "weight",
    "data_region",
    "base_url",
    "api_version",
    "supports_stream_usage",
    "speaks_responses",
    "is_active",
    "created_at",
    "updated_at",
    "rotated_at",
}


def new_key(**overrides) -> dict:
    return {"provider": "openai", "key": SECRET, "weight": 2, "data_region": "eu", **overrides}


def listed(client) -> dict[str, dict]:
    response = client.get(URL)
    assert response.status_code == 200
    return {key["id"]: key for key in response.json()["results"]}


def stored_secret(key_id) -> str:
    return ProviderKey.objects.get(pk=key_id).secret()


def assert_invalid_field(response, field: str) -> dict:
    error = assert_error(response, 400, "validation_error")
    assert field in error["fields"], error["fields"]
    return error


@pytest.fixture
def provider_key(organization) -> ProviderKey:
    return create_provider_key(organization, secret="sk-old-secret-1111", weight=3, data_region="eu")


@pytest.fixture
def outsiders_key(outsider) -> ProviderKey:
    return create_provider_key(outsider.organization, secret="sk-theirs-9999", weight=5)


@pytest.fixture
def private_upstreams(settings):
    settings.GATEWAY_ALLOW_PRIVATE_UPSTREAMS = True


@pytest.fixture
def public_upstreams_only(settings):
    settings.GATEWAY_ALLOW_PRIVATE_UPSTREAMS = False


# --- create ------------------------------------------------------------------------------------


def test_it_creates_a_provider_key_and_shows_only_a_hint_of_the_secret(session_client):
    response = session_client.post(URL, new_key(name="primary"), format="json")

    assert response.status_code == 201
    body = response.json()
    assert set(body) == SHOWN_FIELDS
    uuid.UUID(body["id"])
    assert body["provider"] == "openai"
    assert body["name"] == "primary"
    assert body["key_hint"] == "…7Qx9"
    assert body["weight"] == 2.0
    assert body["data_region"] == "eu"
    assert body["base_url"] == ""
    assert body["is_active"] is True
    assert body["supports_stream_usage"] is True
    assert body["speaks_responses"] is False
    assert body["rotated_at"] is None
    assert body["created_at"].endswith("Z")
    assert SECRET not in response.content.decode()


def test_the_weight_defaults_to_one(session_client):
    request = new_key()
    del request["weight"]

    body = session_client.post(URL, request, format="json").json()

    assert body["weight"] == 1.0


def test_it_stores_the_secret_encrypted(session_client):
    body = session_client.post(URL, new_key(), format="json").json()

    row = ProviderKey.objects.filter(pk=body["id"]).values().get()
    assert not [column for column, value in row.items() if SECRET in str(value)]
    assert crypto.decrypt(row["secret_encrypted"]) == SECRET
    assert row["key_hint"] == "7Qx9"


def test_it_creates_an_azure_openai_key_with_its_base_url_and_api_version(session_client):
    request = new_key(provider="azure_openai", base_url="https://8.8.8.8/", api_version="2024-10-21")

    response = session_client.post(URL, request, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["base_url"] == "https://8.8.8.8"
    assert body["api_version"] == "2024-10-21"


def test_it_creates_an_openai_compatible_key_that_does_not_report_stream_usage(session_client):
    request = new_key(provider="openai_compatible", base_url=PUBLIC_URL, supports_stream_usage=False)

    body = session_client.post(URL, request, format="json").json()

    assert body["base_url"] == PUBLIC_URL
    assert body["supports_stream_usage"] is False


def test_a_weight_of_zero_is_allowed_to_drain_a_key(session_client):
    response = session_client.post(URL, new_key(weight=0), format="json")

    assert response.status_code == 201
    assert response.json()["weight"] == 0.0


def test_an_admin_can_create_a_provider_key(client_for, organization):
    admin = client_for(organization, "admin")

    assert admin.post(URL, new_key(), format="json").status_code == 201


def test_creating_a_key_bumps_the_configuration_generation(
    session_client, organization, django_capture_on_commit_callbacks
):
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        assert session_client.post(URL, new_key(), format="json").status_code == 201


# --- upstream addresses ------------------------------------------------------------------------


@pytest.mark.parametrize("allow_private", [False, True])
@pytest.mark.parametrize(
    "base_url",
    [
        "http://169.254.169.254/",
        "http://169.254.169.254/latest/meta-data",
        "http://2852039166/",  # 169.254.169.254 written as one number
        "http://[::ffff:169.254.169.254]/",
        "http://[fd00:ec2::254]/",
        "http://100.100.100.200/",
    ],
)
def test_it_refuses_a_metadata_address_whatever_the_setting(
    session_client, settings, allow_private, base_url
):
    settings.GATEWAY_ALLOW_PRIVATE_UPSTREAMS = allow_private

    response = session_client.post(
        URL, new_key(provider="openai_compatible", base_url=base_url), format="json"
    )

    error = assert_invalid_field(response, "base_url")
    assert "never allowed" in error["fields"]["base_url"][0]
    assert listed(session_client) == {}


@pytest.mark.parametrize(
    "base_url",
    ["http://127.0.0.1:8080/v1", "http://10.0.0.7/v1", "http://localhost:11434/v1", "http://[::1]/"],
)
def test_it_refuses_a_private_address_unless_private_upstreams_are_allowed(
    session_client, public_upstreams_only, base_url
):
    response = session_client.post(
        URL, new_key(provider="openai_compatible", base_url=base_url), format="json"
    )

    error = assert_invalid_field(response, "base_url")
    assert "GATEWAY_ALLOW_PRIVATE_UPSTREAMS" in error["fields"]["base_url"][0]
    assert listed(session_client) == {}


def test_it_accepts_a_private_address_when_private_upstreams_are_allowed(session_client, private_upstreams):
    request = new_key(provider="openai_compatible", base_url="http://127.0.0.1:8080/v1")

    response = session_client.post(URL, request, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["base_url"] == "http://127.0.0.1:8080/v1"


@pytest.mark.parametrize(
    "base_url",
    [
        "https://user:password@8.8.8.8/v1",
        "https://8.8.8.8/v1?api-key=secret",
        "https://8.8.8.8/v1#fragment",
        "ftp://8.8.8.8/",
        "8.8.8.8/v1",
        "https:///v1",
        "https://8.8.8.8:99999/v1",
        "https://8.8.8.8:port/v1",
        "https://[::1/v1",
        "https://host-that-does-not-resolve.invalid/v1",
    ],
)
def test_it_refuses_a_base_url_it_cannot_call_safely(session_client, private_upstreams, base_url):
    response = session_client.post(URL, new_key(base_url=base_url), format="json")

    assert_invalid_field(response, "base_url")
    assert listed(session_client) == {}


def test_an_address_refusal_never_echoes_credentials_from_the_url(session_client):
    response = session_client.post(URL, new_key(base_url="https://admin:hunter2@8.8.8.8/v1"), format="json")

    assert_invalid_field(response, "base_url")
    assert "hunter2" not in response.content.decode()


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"provider": "cohere"}, "provider"),
        ({"provider": None}, "provider"),
        ({"key": ""}, "key"),
        ({"key": "abc"}, "key"),
        ({"key": 12345678}, "key"),
        ({"weight": -1}, "weight"),
        ({"weight": "abc"}, "weight"),
        ({"weight": True}, "weight"),
        ({"weight": "NaN"}, "weight"),
        ({"weight": 10_000_001}, "weight"),
        ({"data_region": ""}, "data_region"),
        ({"data_region": "EU West!"}, "data_region"),
        ({"data_region": 5}, "data_region"),
        ({"data_region": "x" * 33}, "data_region"),
        ({"name": 7}, "name"),
        ({"provider": "azure_openai", "api_version": "2024-10-21"}, "base_url"),
        ({"provider": "openai_compatible"}, "base_url"),
        ({"provider": "azure_openai", "base_url": PUBLIC_URL}, "api_version"),
        ({"provider": "azure_openai", "base_url": PUBLIC_URL, "api_version": "2024 10 21"}, "api_version"),
        ({"supports_stream_usage": "sometimes"}, "supports_stream_usage"),
    ],
)
def test_it_rejects_bad_input_naming_the_field(session_client, overrides, field):
    response = session_client.post(URL, new_key(**overrides), format="json")

    assert_invalid_field(response, field)
    assert listed(session_client) == {}


@pytest.mark.parametrize("missing", ["provider", "key", "data_region"])
def test_it_requires_provider_key_and_region(session_client, missing):
    request = new_key()
    del request[missing]

    assert_invalid_field(session_client.post(URL, request, format="json"), missing)


def test_a_refusal_never_echoes_the_secret(session_client):
    response = session_client.post(URL, new_key(provider="cohere"), format="json")

    assert_invalid_field(response, "provider")
    assert SECRET not in response.content.decode()


def test_it_rejects_a_malformed_json_body(session_client):
    response = session_client.post(URL, data='{"provider": ', content_type="application/json")

    assert_error(response, 400, "parse_error")


def test_it_rejects_a_body_that_is_not_an_object(session_client):
    response = session_client.post(URL, [new_key()], format="json")

    assert_error(response, 400, "validation_error")
    assert listed(session_client) == {}


def test_a_refused_create_does_not_bump_the_generation(
    session_client, organization, django_capture_on_commit_callbacks
):
    with bumps_generation(organization, django_capture_on_commit_callbacks, bumped=False):
        assert session_client.post(URL, new_key(weight=-1), format="json").status_code == 400


# --- list and retrieve -------------------------------------------------------------------------


def test_the_list_shows_the_organizations_keys_newest_first_without_secrets(session_client, provider_key):
    created = session_client.post(URL, new_key(), format="json").json()

    response = session_client.get(URL)

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"next", "previous", "results"}
    assert [key["id"] for key in body["results"]] == [created["id"], str(provider_key.id)]
    assert all(set(key) == SHOWN_FIELDS for key in body["results"])
    assert SECRET not in response.content.decode()
    assert "sk-old-secret-1111" not in response.content.decode()


def test_one_key_can_be_read_without_its_secret(session_client, provider_key):
    response = session_client.get(f"{URL}/{provider_key.id}")

    assert response.status_code == 200
    body = response.json()
    assert set(body) == SHOWN_FIELDS
    assert body["key_hint"] == "…1111"
    assert (body["weight"], body["data_region"]) == (3.0, "eu")
    assert "sk-old-secret-1111" not in response.content.decode()


def test_the_list_never_shows_the_outsiders_keys(session_client, provider_key, outsiders_key):
    response = session_client.get(URL)

    assert list(listed(session_client)) == [str(provider_key.id)]
    assert str(outsiders_key.id) not in response.content.decode()


def test_it_answers_404_for_a_key_that_does_not_exist(session_client):
    assert_error(session_client.get(f"{URL}/{uuid.uuid4()}"), 404, "not_found")
    assert_error(session_client.get(f"{URL}/not-a-uuid"), 404, "not_found")


# --- update ------------------------------------------------------------------------------------


def test_it_changes_weight_region_and_activity(session_client, provider_key):
    changes = {"weight": 0.5, "data_region": "us-east", "is_active": False}

    response = session_client.patch(f"{URL}/{provider_key.id}", changes, format="json")

    assert response.status_code == 200, response.content
    read_back = session_client.get(f"{URL}/{provider_key.id}").json()
    assert {field: read_back[field] for field in changes} == changes
    assert read_back["key_hint"] == "…1111"
    assert read_back["rotated_at"] is None
    assert stored_secret(provider_key.id) == "sk-old-secret-1111"


@pytest.mark.parametrize("base_url", [PUBLIC_URL, ""])
def test_it_refuses_to_send_the_stored_secret_to_a_new_base_url(session_client, provider_key, base_url):
    # Otherwise an admin could point the key at a server of their own and read the secret there.
    response = session_client.patch(f"{URL}/{provider_key.id}", {"base_url": base_url}, format="json")

    error = assert_error(response, 400, "key_required")
    assert "key" in error["fields"]
    read_back = session_client.get(f"{URL}/{provider_key.id}").json()
    assert (read_back["base_url"], read_back["rotated_at"]) == ("", None)
    assert stored_secret(provider_key.id) == "sk-old-secret-1111"


def test_a_new_base_url_takes_the_secret_sent_with_it(session_client, provider_key):
    response = session_client.patch(
        f"{URL}/{provider_key.id}", {"base_url": PUBLIC_URL, "key": "sk-for-the-new-host-3333"}, format="json"
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["base_url"], body["key_hint"]) == (PUBLIC_URL, "…3333")
    assert body["rotated_at"] is not None
    assert "sk-for-the-new-host-3333" not in response.content.decode()
    assert stored_secret(provider_key.id) == "sk-for-the-new-host-3333"


def test_the_admin_console_refuses_a_new_base_url_without_the_secret(organization, provider_key):
    from django.test import Client

    from tests.factories import UserFactory

    browser = Client()
    browser.force_login(UserFactory(is_staff=True, is_superuser=True))
    form = {
        "name": "",
        "weight": "3",
        "data_region": "eu",
        "base_url": PUBLIC_URL,
        "api_version": "",
        "supports_stream_usage": "on",
        "is_active": "on",
        "secret": "",
    }
    change_page = f"/admin/providers/providerkey/{provider_key.id}/change/"

    refused = browser.post(change_page, form)
    accepted = browser.post(change_page, {**form, "secret": "sk-for-the-new-host-4444"})

    assert refused.status_code == 200
    assert "needs the secret again" in refused.content.decode()
    assert accepted.status_code == 302, accepted.content.decode()
    provider_key.refresh_from_db()
    assert (provider_key.base_url, provider_key.secret()) == (PUBLIC_URL, "sk-for-the-new-host-4444")


def test_a_patch_changes_only_the_fields_it_names(session_client, provider_key):
    before = session_client.get(f"{URL}/{provider_key.id}").json()

    after = session_client.patch(f"{URL}/{provider_key.id}", {"name": "renamed"}, format="json").json()

    assert after["name"] == "renamed"
    unchanged = SHOWN_FIELDS - {"name", "updated_at"}
    assert {f: after[f] for f in unchanged} == {f: before[f] for f in unchanged}


def test_a_key_can_be_drained_with_weight_zero(session_client, provider_key):
    response = session_client.patch(f"{URL}/{provider_key.id}", {"weight": 0}, format="json")

    assert response.status_code == 200
    assert response.json()["weight"] == 0.0


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"weight": -0.1}, "weight"),
        ({"weight": "abc"}, "weight"),
        ({"data_region": "EU West!"}, "data_region"),
        ({"data_region": None}, "data_region"),
        ({"base_url": "http://169.254.169.254/"}, "base_url"),
        ({"is_active": "perhaps"}, "is_active"),
        ({"is_active": 0}, "is_active"),
        ({"supports_stream_usage": 1}, "supports_stream_usage"),
    ],
)
def test_it_rejects_a_bad_change_and_keeps_the_key(session_client, provider_key, changes, field):
    response = session_client.patch(f"{URL}/{provider_key.id}", changes, format="json")

    assert_invalid_field(response, field)
    read_back = session_client.get(f"{URL}/{provider_key.id}").json()
    assert (read_back["weight"], read_back["data_region"], read_back["base_url"]) == (3.0, "eu", "")


def test_it_refuses_to_change_the_secret_in_a_patch_and_points_to_rotate(session_client, provider_key):
    response = session_client.patch(f"{URL}/{provider_key.id}", {"key": "sk-sneaky-2222"}, format="json")

    error = assert_invalid_field(response, "key")
    assert "rotate" in error["fields"]["key"][0]
    assert "sk-sneaky-2222" not in response.content.decode()
    assert stored_secret(provider_key.id) == "sk-old-secret-1111"


def test_it_refuses_to_change_the_provider_of_a_key(session_client, provider_key):
    response = session_client.patch(f"{URL}/{provider_key.id}", {"provider": "anthropic"}, format="json")

    assert_invalid_field(response, "provider")
    assert session_client.get(f"{URL}/{provider_key.id}").json()["provider"] == "openai"


def test_it_refuses_to_remove_the_base_url_an_azure_key_needs(session_client, organization):
    azure = create_provider_key(
        organization, provider="azure_openai", base_url=PUBLIC_URL, api_version="2024-10-21"
    )

    no_url = session_client.patch(f"{URL}/{azure.id}", {"base_url": ""}, format="json")
    no_version = session_client.patch(f"{URL}/{azure.id}", {"api_version": ""}, format="json")

    assert_invalid_field(no_url, "base_url")
    assert_invalid_field(no_version, "api_version")
    read_back = session_client.get(f"{URL}/{azure.id}").json()
    assert (read_back["base_url"], read_back["api_version"]) == (PUBLIC_URL, "2024-10-21")


def test_a_private_base_url_is_refused_in_a_patch_unless_allowed(session_client, provider_key, settings):
    change = {"base_url": "http://127.0.0.1:8080/v1", "key": "sk-local-5555"}
    settings.GATEWAY_ALLOW_PRIVATE_UPSTREAMS = False
    refused = session_client.patch(f"{URL}/{provider_key.id}", change, format="json")
    settings.GATEWAY_ALLOW_PRIVATE_UPSTREAMS = True
    accepted = session_client.patch(f"{URL}/{provider_key.id}", change, format="json")

    assert_invalid_field(refused, "base_url")
    assert accepted.status_code == 200
    assert accepted.json()["base_url"] == "http://127.0.0.1:8080/v1"


def test_changing_a_key_bumps_the_configuration_generation(
    session_client, organization, provider_key, django_capture_on_commit_callbacks
):
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = session_client.patch(f"{URL}/{provider_key.id}", {"is_active": False}, format="json")
        assert response.status_code == 200


def test_it_refuses_put_on_a_key(session_client, provider_key):
    response = session_client.put(f"{URL}/{provider_key.id}", new_key(), format="json")

    assert_error(response, 405, "method_not_allowed")


# --- delete ------------------------------------------------------------------------------------


def test_it_deletes_a_key(session_client, provider_key):
    response = session_client.delete(f"{URL}/{provider_key.id}")

    assert response.status_code == 204
    assert response.content == b""
    assert listed(session_client) == {}
    assert_error(session_client.get(f"{URL}/{provider_key.id}"), 404, "not_found")
    assert not ProviderKey.objects.filter(pk=provider_key.id).exists()


def test_deleting_a_key_bumps_the_configuration_generation(
    session_client, organization, provider_key, django_capture_on_commit_callbacks
):
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        assert session_client.delete(f"{URL}/{provider_key.id}").status_code == 204


# --- rotate ------------------------------------------------------------------------------------


def test_rotating_replaces_the_secret_and_keeps_the_key(session_client, provider_key):
    before = session_client.get(f"{URL}/{provider_key.id}").json()

    response = session_client.post(
        f"{URL}/{provider_key.id}/rotate", {"key": "sk-new-secret-2222"}, format="json"
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["key_hint"] == "…2222"
    assert body["rotated_at"] is not None
    assert body["rotated_at"].endswith("Z")
    kept = {"id", "provider", "name", "weight", "data_region", "base_url", "api_version", "is_active"}
    assert {f: body[f] for f in kept} == {f: before[f] for f in kept}
    assert "sk-new-secret-2222" not in response.content.decode()
    assert session_client.get(f"{URL}/{provider_key.id}").json() == body


def test_rotating_stores_the_new_secret_encrypted_and_forgets_the_old_one(session_client, provider_key):
    session_client.post(f"{URL}/{provider_key.id}/rotate", {"key": "sk-new-secret-2222"}, format="json")

    row = ProviderKey.objects.filter(pk=provider_key.id).values().get()
    stored = " ".join(str(value) for value in row.values())
    assert "sk-new-secret-2222" not in stored
    assert "sk-old-secret-1111" not in stored
    assert crypto.decrypt(row["secret_encrypted"]) == "sk-new-secret-2222"


@pytest.mark.parametrize(
    "send",
    [
        lambda client, url: client.post(url),
        lambda client, url: client.post(url, data="", content_type="application/json"),
        lambda client, url: client.post(url, {}, format="json"),
        lambda client, url: client.post(url, {"secret": "sk-new-secret-2222"}, format="json"),
        lambda client, url: client.post(url, ["sk-new-secret-2222"], format="json"),
    ],
    ids=["no body", "empty json body", "empty object", "wrong field", "a list"],
)
def test_rotating_without_a_replacement_is_refused(session_client, provider_key, send):
    response = send(session_client, f"{URL}/{provider_key.id}/rotate")

    error = assert_error(response, 400, "replacement_required")
    assert '{"key"' in error["message"]
    assert stored_secret(provider_key.id) == "sk-old-secret-1111"
    assert session_client.get(f"{URL}/{provider_key.id}").json()["rotated_at"] is None


@pytest.mark.parametrize("replacement", ["", "abc", None, 42])
def test_rotating_to_an_invalid_replacement_is_refused(session_client, provider_key, replacement):
    response = session_client.post(f"{URL}/{provider_key.id}/rotate", {"key": replacement}, format="json")

    assert_invalid_field(response, "key")
    assert stored_secret(provider_key.id) == "sk-old-secret-1111"


def test_rotating_bumps_the_configuration_generation(
    session_client, organization, provider_key, django_capture_on_commit_callbacks
):
    with bumps_generation(organization, django_capture_on_commit_callbacks):
        response = session_client.post(
            f"{URL}/{provider_key.id}/rotate", {"key": "sk-new-2222"}, format="json"
        )
        assert response.status_code == 200


def test_a_refused_rotation_does_not_bump_the_generation(
    session_client, organization, provider_key, django_capture_on_commit_callbacks
):
    with bumps_generation(organization, django_capture_on_commit_callbacks, bumped=False):
        assert session_client.post(f"{URL}/{provider_key.id}/rotate").status_code == 400


@pytest.mark.django_db(transaction=True)
def test_a_committed_rotation_moves_the_generation_the_proxy_reads(
    session_client, organization, provider_key
):
    client = sync_client()
    shared_before = int(client.get(generation_key(organization.id)) or 0) if client is not None else None
    before = local_generation(organization.id)

    response = session_client.post(f"{URL}/{provider_key.id}/rotate", {"key": "sk-new-2222"}, format="json")

    assert response.status_code == 200
    assert local_generation(organization.id) > before
    if client is not None:  # with Redis, every worker sees the move
        assert int(client.get(generation_key(organization.id))) > shared_before


# --- roles -------------------------------------------------------------------------------------


def test_a_member_can_read_keys_but_not_change_them(client_for, organization, provider_key):
    member = client_for(organization, "member")
    one = f"{URL}/{provider_key.id}"

    assert list(listed(member)) == [str(provider_key.id)]
    assert member.get(one).status_code == 200
    assert_error(member.post(URL, new_key(), format="json"), 403, "permission_denied")
    assert_error(member.patch(one, {"weight": 0}, format="json"), 403, "permission_denied")
    assert_error(member.delete(one), 403, "permission_denied")
    assert_error(
        member.post(f"{one}/rotate", {"key": "sk-member-3333"}, format="json"), 403, "permission_denied"
    )
    assert list(listed(member)) == [str(provider_key.id)]
    assert stored_secret(provider_key.id) == "sk-old-secret-1111"


def test_it_needs_a_session(api_client, provider_key):
    assert_error(api_client.get(URL), 401, "not_authenticated")


# --- the outsider ------------------------------------------------------------------------------


def test_the_outsiders_key_is_invisible_and_untouchable(session_client, outsiders_key):
    one = f"{URL}/{outsiders_key.id}"

    responses = [
        session_client.get(one),
        session_client.patch(one, {"weight": 0}, format="json"),
        session_client.delete(one),
        session_client.post(f"{one}/rotate", {"key": "sk-mine-now-4444"}, format="json"),
        session_client.post(f"{one}/rotate"),
    ]

    for response in responses:
        assert_error(response, 404, "not_found")
    assert len({response.content for response in responses}) == 1
    assert listed(session_client) == {}
    outsiders_key.refresh_from_db()
    assert outsiders_key.weight == 5
    assert outsiders_key.secret() == "sk-theirs-9999"
    assert outsiders_key.rotated_at is None


def test_the_outsiders_key_answers_like_a_key_that_does_not_exist(session_client, outsiders_key):
    theirs = session_client.get(f"{URL}/{outsiders_key.id}")
    unknown = session_client.get(f"{URL}/{uuid.uuid4()}")

    assert theirs.json() == unknown.json()
