"""A DNS server on loopback for the tests that prove an SSO domain by its TXT record.

It answers UDP queries (dnspython parses and builds the messages) from ``records``: a name's TXT
values, NXDOMAIN for a name it does not know; with ``silent`` set it answers nothing, as a resolver
that times out. The gateway is pointed at it with ``GATEWAY_SSO_DNS_RESOLVERS = [("127.0.0.1", port)]``.
"""

import socket
import threading

import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset


class LoopbackDnsServer:
    def __init__(self) -> None:
        self.records: dict[str, list[str]] = {}
        self.silent = False
        self.queries: list[str] = []
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.settimeout(0.2)
        self.address = self._socket.getsockname()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def start(self) -> "LoopbackDnsServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._socket.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, client = self._socket.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            query = dns.message.from_wire(data)
            question = query.question[0]
            name = question.name.to_text(omit_final_dot=True).lower()
            self.queries.append(name)
            if self.silent:
                continue
            response = dns.message.make_response(query)
            values = self.records.get(name)
            if values is None:
                response.set_rcode(dns.rcode.NXDOMAIN)
            elif question.rdtype == dns.rdatatype.TXT:
                quoted = [f'"{value}"' for value in values]
                response.answer.append(
                    dns.rrset.from_text(question.name, 60, dns.rdataclass.IN, dns.rdatatype.TXT, *quoted)
                )
            self._socket.sendto(response.to_wire(), client)
