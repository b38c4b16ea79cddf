"""The audit spool's lines (apps/core/crypto.py ``seal_line``): AES-256-GCM under a key of each
process's own, a counter for nonce, readable after a key rotation, and nothing readable that was not
sealed by this gateway's keys."""

import binascii
import os

import pytest
from cryptography.fernet import Fernet
from django.test import override_settings

from apps.core import crypto

OLD_KEY = Fernet.generate_key().decode()
NEW_KEY = Fernet.generate_key().decode()


@pytest.fixture
def keys():
    def use(*keys: str):
        crypto.forget_keys()
        return override_settings(GATEWAY_ENCRYPTION_KEYS=list(keys))

    yield use
    crypto.forget_keys()


def parts(line: bytes) -> tuple[bytes, bytes]:
    sealed = binascii.a2b_base64(line[len(crypto.LINE_PREFIX) :])
    return sealed[:16], sealed[16:28]  # salt, nonce


def test_a_line_opens_to_what_was_sealed_and_holds_no_newline(keys):
    with keys(OLD_KEY):
        payload = b"\n".join([b"an audit record", os.urandom(2000)])
        line = crypto.seal_line(payload)

        assert line.startswith(b"g1.") and b"\n" not in line
        assert payload not in line
        assert crypto.open_line(line) == payload


def test_no_two_lines_of_a_process_share_a_nonce(keys):
    with keys(OLD_KEY):
        lines = [crypto.seal_line(b"the same record") for _ in range(1000)]

    salts, nonces = zip(*map(parts, lines), strict=True)
    assert len(set(salts)) == 1  # one key for the process
    assert len(set(nonces)) == 1000
    assert len(set(lines)) == 1000


def test_a_forked_process_seals_under_a_key_of_its_own(keys):
    with keys(OLD_KEY):
        parent_line = crypto.seal_line(b"from the parent")
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through the pipe
            os.write(write, crypto.seal_line(b"from the child"))
            os._exit(0)
        os.close(write)
        os.waitpid(child, 0)
        child_line = os.read(read, 4096)
        os.close(read)

        assert parts(child_line)[0] != parts(parent_line)[0]
        assert crypto.open_line(child_line) == b"from the child"


def test_a_line_sealed_before_a_key_rotation_opens_after_it(keys):
    with keys(OLD_KEY):
        line = crypto.seal_line(b"written before the rotation")
    with keys(NEW_KEY, OLD_KEY):
        assert crypto.open_line(line) == b"written before the rotation"
        assert crypto.open_line(crypto.seal_line(b"after")) == b"after"
    with keys(NEW_KEY):  # the old key dropped: its lines are unreadable, not misread
        with pytest.raises(crypto.InvalidToken):
            crypto.open_line(line)


def test_a_line_an_older_release_wrote_with_fernet_still_opens(keys):
    with keys(OLD_KEY):
        assert crypto.open_line(Fernet(OLD_KEY).encrypt(b"release 1")) == b"release 1"


@pytest.mark.parametrize(
    "damage",
    [
        lambda line: line[:-3] + (b"AAA" if not line.endswith(b"AAA") else b"BBB"),  # the tag
        lambda line: line[:40] + (b"A" if line[40:41] != b"A" else b"B") + line[41:],  # the salt
        lambda line: line[:60],  # cut short
        lambda line: b"g1." + b"not base64!",
        lambda line: b"g1.",
        lambda line: b"gAAAAAnot-a-fernet-token",
    ],
)
def test_a_damaged_line_is_refused(keys, damage):
    with keys(OLD_KEY):
        line = crypto.seal_line(b"an audit record of some length " * 4)
        with pytest.raises(crypto.InvalidToken):
            crypto.open_line(damage(line))
