def test_an_owner_can_create_a_key_and_see_it_listed_without_the_secret(session_client):
    created = session_client.post("/api/v1/api-keys", {"name": "ci"}, format="json")
    assert created.status_code == 201
    listed = session_client.get("/api/v1/api-keys").json()["results"]
    assert [k["id"] for k in listed] == [created.json()["id"]]
    assert "key" not in listed[0]
