"""The detectors, one by one: what each finds, and the near misses it must leave alone."""

import pytest

from apps.core.detectors import Scanner, detector
from apps.policies.engine import PolicyEngine, PolicySnapshot

FOUND = {
    "email": ["ada@example.com", "bob.smith+tag@mail.corp.example.org"],
    "phone": ["+44 20 7946 0958", "+1-555-123-4567", "(555) 123-4567", "555.123.4567", "+4915112345678"],
    "payment_card": ["4111 1111 1111 1111", "4111-1111-1111-1111", "5555555555554444", "378282246310005"],
    "iban": ["DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432", "FR1420041010050500013M02606"],
    "us_ssn": ["123-45-6789", "078 05 1120"],
    "ip_address": ["10.0.0.1", "192.168.1.254", "2001:db8::1", "fe80::1ff:fe23:4567:890a", "::ffff:10.0.0.1"],
    "secret": [
        "sk-proj-abcdefghijklmnopqrstuv",
        "sk-ant-api03-abcdefghijklmnopqrstuvwx",
        "sk_live_ABCDEFGHIJKLMNOPQRSTUVWXYZ012345",
        "pk_test_abcdefghijklmnop1234",
        "rk_live_abcdefghijklmnop1234",
        "AKIAIOSFODNN7EXAMPLE",
        "Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig",
        "whsec_abcdefghijklmnopqrstuvwx",
    ],
}
MISSED = {
    "email": ["ada@", "@example.com", "ada at example dot com", "user@localhost"],
    "phone": ["2024-01-15", "12345", "version 1.2.3", "call 911"],
    # 16 digits that fail Luhn; too short; a run inside a longer token
    "payment_card": ["4111 1111 1111 1112", "1234 5678 9012 3456", "4111 1111 111", "id4111111111111111"],
    # a wrong checksum; a country that has no IBAN; the right country with the wrong length
    "iban": ["DE89 3704 0044 0532 0130 01", "ZZ89 3704 0044 0532 0130 00", "DE89 3704 0044 0532 0130"],
    "us_ssn": ["000-12-3456", "666-12-3456", "912-34-5678", "123-00-4567", "123-45-0000", "123-45-67890"],
    "ip_address": ["256.1.1.1", "1.2.3", "12:30:45", "00:1A:2B:3C:4D:5E", "std::vector", "01.2.3.4"],
    "secret": ["sk-short", "task-abcdefghijklmnopqrstuv", "AKIA123", "bearer token", "whsec_short"],
}


def found(name: str, text: str) -> list[str]:
    scanner = Scanner([detector(name)])
    return [text[m.start : m.end] for m in scanner.scan(text)]


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, values in FOUND.items() for v in values])
def test_each_detector_finds_its_kind_in_a_sentence(name, value):
    assert found(name, f"Here it is: {value}, thanks.") == [value]


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, values in FOUND.items() for v in values])
def test_each_detector_finds_its_kind_late_in_a_long_text_and_in_one_that_is_not_ascii(name, value):
    """The search starts at the first character a match can start with (an ASCII text), or at the
    beginning (any other text): both find the same."""
    prose = "Nothing to see in this sentence, only words. " * 200
    assert found(name, f"{prose}Here it is: {value}, thanks.") == [value]
    assert found(name, f"Café, naïve — {prose}Here it is: {value}, thanks.") == [value]


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, values in MISSED.items() for v in values])
def test_each_detector_leaves_its_near_misses_alone(name, value):
    assert found(name, f"Here it is: {value}, thanks.") == []


def test_a_gateway_key_of_a_custom_prefix_is_a_secret(settings):
    settings.GATEWAY_API_KEY_PREFIX = "acme.gw-"

    assert found("secret", "key acme.gw-ABCDEFGHIJKLMNOPQRSTUV here") == ["acme.gw-ABCDEFGHIJKLMNOPQRSTUV"]


def test_a_detector_that_refuses_a_match_leaves_the_place_to_the_next_rule():
    """A card number that fails Luhn, and a pattern that matches the same digits after it."""
    engine = PolicyEngine.build(
        [
            PolicySnapshot(
                id="1",
                name="p",
                action="redact",
                detectors=("payment_card",),
                patterns=(r"\d{4} \d{4}",),
                rules_checked=True,
            )
        ]
    )

    verdict = engine.check_request(
        {"input": "n 1234 5678 9012 3456"}, endpoint="embeddings", model="m", team_id=None, api_key_id="k"
    )

    assert verdict.body["input"] == "n [REDACTED:pattern] [REDACTED:pattern]"
