"""A real HTTPS webhook receiver on loopback, for the tests: a thread running ``http.server`` with TLS,
its certificate self-signed (made here with ``cryptography``) for 127.0.0.1, localhost and
hooks.example.test, and trusted by the gateway through ``SSL_CERT_FILE``. It records every request it
gets, and answers with the statuses it is told to (200 when told nothing), or hangs."""

import datetime
import ipaddress
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

NAMES = ("localhost", "hooks.example.test")


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) files: a self-signed certificate for loopback and the test names."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "webhook test receiver")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        # Valid long enough for the tests that travel forward in time.
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    *(x509.DNSName(host) for host in NAMES),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("::1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    certificate_file, key_file = directory / "receiver.pem", directory / "receiver.key"
    certificate_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return certificate_file, key_file


@dataclass
class Received:
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes


class Receiver:
    def __init__(self, directory: Path) -> None:
        self.certificate, key = make_certificate(directory)
        self.received: list[Received] = []
        self.statuses: list[int] = []  # answered in turn; 200 once they run out
        self.always: int | None = None  # answered every time when set
        self.hang = False
        self._release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                receiver.received.append(
                    Received(self.path, {name.lower(): value for name, value in self.headers.items()}, body)
                )
                if receiver.hang:
                    receiver._release.wait(30)
                    return
                status = receiver.always or (receiver.statuses.pop(0) if receiver.statuses else 200)
                answer = b"receiver says no" if status >= 400 else b"ok"
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", "https://127.0.0.1:9/elsewhere")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format, *args) -> None:  # quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.certificate, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, host: str = "127.0.0.1", path: str = "/hook") -> str:
        return f"https://{host}:{self.port}{path}"

    def close(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()
