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
    line = crypto.encrypt_bytes(b"pickled record holding " + SECRET.encode())
    ledger.scan_bytes(b"header\n" + line + b"\n", "spool file")

    assert ledger.findings == [f"spool file (decrypted): secret {ledger.findings[0].split()[-2]} (sk_l...)"]


def test_masked_keys_and_short_test_labels_are_not_findings():
    ledger = Ledger()
    ledger.add(SECRET)
    ledger.add("first")  # a fixture's label, not a secret
    ledger.scan(f"key {SECRET[:12]}...{SECRET[-4:]} of the first team", "audit row")

    assert ledger.findings == []
