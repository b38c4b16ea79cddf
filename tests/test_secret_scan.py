"""The run's secret scan (tests/secret_scan.py) finds what it is there to find."""

from apps.core import crypto
from tests.secret_scan import Ledger

SECRET = "sk_live_0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"


def test_it_finds_a_secret_in_plain_text_and_names_it_by_fingerprint_only():
    ledger = Ledger()
    ledger.add(SECRET)
    ledger.scan(f"INFO proxy key {SECRET} used", "server log")

    assert len(ledger.findings) == 1
    assert "server log" in ledger.findings[0]
    assert SECRET not in ledger.findings[0]


def test_it_finds_a_secret_inside_an_encrypted_spool_line():
    ledger = Ledger()
    ledger.add(SECRET)
    line = crypto.seal_line(b"pickled record holding " + SECRET.encode())
    ledger.scan_bytes(b"header\n" + line + b"\n", "spool file")

    assert ledger.findings == [f"spool file (decrypted): secret {ledger.findings[0].split()[-2]} (sk_l...)"]


def test_masked_keys_and_short_test_labels_are_not_findings():
    ledger = Ledger()
    ledger.add(SECRET)
    ledger.add("first")  # a fixture's label, not a secret
    ledger.scan(f"key {SECRET[:12]}...{SECRET[-4:]} of the first team", "audit row")

    assert ledger.findings == []


def test_a_word_of_the_gateways_own_code_is_not_taken_for_a_secret():
    # Hypothesis draws the code's constants as examples: schemathesis once made a provider key
    # whose secret was "organization_id", a field name every audit record carries.
    ledger = Ledger()
    ledger.add("organization_id")
    ledger.add(SECRET)
    ledger.scan('{"organization_id": "0b1c", "note": "' + SECRET + '"}', "spool record")

    assert len(ledger.findings) == 1


def test_with_more_secrets_than_it_looks_for_one_by_one_it_still_finds_each_and_only_those():
    ledger = Ledger()
    many = [f"sk_live_{number:04d}_{'x' * 30}" for number in range(Ledger.RECENT_LIMIT * 3)]
    for secret in many:
        ledger.add(secret)
    ledger.add(SECRET)  # one added after the matcher was last built

    ledger.scan(f"first {many[7]} then {many[-1]} and {SECRET}", "server log")
    ledger.scan("sk_live_0007_" + "x" * 29, "a near miss")

    assert sorted(finding.split(":")[0] for finding in ledger.findings) == ["server log"] * 3
