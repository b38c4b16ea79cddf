"""The management API while PostgreSQL is out of reach (issue 20, section 2): a quick 503 in the
management error shape, sign-in included, never a 500; and back to normal once the database is.

A live Daphne whose database sits behind a loopback TCP proxy the test severs."""

import time

import httpx
import pytest
from django.contrib.auth.hashers import make_password
from django.db import connection

from tests.factories import PASSWORD, create_api_key
from tests.servers import daphne_server
from tests.tcp_proxy import TcpProxy

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="cuts a PostgreSQL connection"),
]


def database_url_through(proxy: TcpProxy) -> str:
    db = connection.settings_dict
    credentials = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{credentials}@127.0.0.1:{proxy.port}/{db['NAME']}"


def assert_database_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.json() == {
        "error": {
            "type": "service_unavailable_error",
            "code": "database_unavailable",
            "message": "The gateway cannot reach its database now; retry shortly.",
        }
    }
    assert response.headers["retry-after"] == "1"


def test_the_management_api_answers_503_quickly_while_the_database_is_away(owner, outsider, tmp_path):
    _, theirs = create_api_key(outsider.organization, name="outsider's key")
    owner.user.password = make_password(PASSWORD, hasher="pbkdf2_sha256")  # the live server's hasher
    owner.user.save(update_fields=["password"])
    sign_in = {"email": owner.user.email, "password": PASSWORD}
    db = connection.settings_dict

    with TcpProxy(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)) as cut:
        env = {"DATABASE_URL": database_url_through(cut), "DATABASE_POOL": "true"}
        with (
            daphne_server(tmp_path, **env) as base_url,
            httpx.Client(base_url=base_url, timeout=30) as client,
        ):
            tokens = client.post("/api/v1/auth/login", json=sign_in).json()
            session = {"Authorization": f"Bearer {tokens['access']}"}
            assert client.get("/api/v1/api-keys", headers=session).status_code == 200

            cut.sever()
            started = time.monotonic()
            for _ in range(5):
                assert_database_unavailable(client.post("/api/v1/auth/login", json=sign_in))
                assert_database_unavailable(client.get("/api/v1/api-keys", headers=session))
                assert_database_unavailable(client.post("/api/v1/auth/refresh", json=tokens))
            assert time.monotonic() - started < 3  # ten answers, not one pool timeout (5 s) among them

            cut.restore()
            deadline = time.monotonic() + 5
            while (response := client.post("/api/v1/auth/login", json=sign_in)).status_code == 503:
                assert time.monotonic() < deadline, "the API did not recover within 5 s"
                time.sleep(0.1)
            assert response.status_code == 200, response.text
            listed = client.get("/api/v1/api-keys", headers=session).json()["results"]
            assert theirs not in str(listed) and "outsider's key" not in str(listed)
