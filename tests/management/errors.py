def assert_error(response, status: int, code: str) -> dict:
    """The management error shape, with the expected status and code."""
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert {"type", "code", "message"} <= set(error)
    assert error["code"] == code
    assert error["message"]
    return error
