import pytest
from django.core.signals import request_finished, request_started
from django.db import close_old_connections


@pytest.fixture
def _keep_the_test_connection(owner_token):
    """For schemathesis's WSGI calls, as Django's test client does (and undoes after each of its own
    requests, so this comes after the sign-in that ``owner_token`` stands for): the WSGI handler
    would otherwise close the connection that holds the test's transaction at the end of each
    request."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)
