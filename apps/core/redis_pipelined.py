"""The proxy's Redis client: one connection per event loop, and the commands of every request issued
in one turn of the loop written together.

redis.asyncio takes a connection from its pool, wraps the call in its retry loop and writes each
command on its own, for every command: most of what admission's one round trip cost a request in
CPU (docs/benchmarks.md, "Issue 23"). Redis answers pipelined commands in order, so here a command
issued while others are in flight is queued and written with the rest in one ``write`` when the loop
turns (one issued with nothing in flight is written at once), and the replies, parsed by hiredis, go
back to the commands in the order they were sent. Under load the requests in flight share each
write and each read.

It speaks what the request path sends: GET, SET (with EX), DEL, MGET, EVAL, EVALSHA and SCRIPT LOAD,
answered as redis-py answers them (bytes, integers, lists). Its errors are redis-py's, so callers
handle them as before:

- ``redis.ConnectionError`` when it cannot connect, or the connection drops with commands waiting;
- ``redis.TimeoutError`` when a reply is later than ``timeout``: the connection is then closed and
  every command waiting on it fails, because a late reply would answer the wrong command;
- ``redis.ResponseError`` (``NoScriptError`` for NOSCRIPT) for Redis's error replies.

A command is never sent twice: a connection that dropped is opened again by the next command. One
that Redis closed while this client was idle (a restart) is noticed before a command is written to
it: the socket is peeked at, as redis-py checks a pooled connection before it uses it.
"""

import asyncio
import collections
import contextvars
import socket
from typing import Any

import hiredis
import redis
from redis.connection import parse_url
from redis.exceptions import AuthenticationError, NoScriptError, ResponseError


class _Protocol(asyncio.Protocol):
    def __init__(self, client: "PipelinedRedis") -> None:
        self.client = client

    def data_received(self, data: bytes) -> None:
        self.client._received(self, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client._lost(self)


class PipelinedRedis:
    def __init__(
        self,
        *,
        host: str,
        port: int,
        db: int = 0,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 0.5,
        connect_timeout: float = 0.5,
    ) -> None:
        self.host, self.port, self.db = host, port, db
        self._username, self._password = username, password
        self.timeout, self.connect_timeout = timeout, connect_timeout
        self._transport: asyncio.Transport | None = None
        self._protocol: _Protocol | None = None
        self._socket: socket.socket | None = None
        self._connecting: asyncio.Task | None = None
        self._reader = hiredis.Reader(replyError=ResponseError)
        # The commands written and not answered yet, oldest first: (reply, when it was queued).
        self._waiting: collections.deque[tuple[asyncio.Future, float]] = collections.deque()
        self._outgoing: list[bytes] = []
        self._flush_scheduled = False
        self._watchdog: asyncio.TimerHandle | None = None

    @classmethod
    def from_url(cls, url: str, *, socket_timeout: float, socket_connect_timeout: float) -> "PipelinedRedis":
        """A ``redis://`` URL, read as redis-py reads it (the database and credentials from the path,
        the user part or the query string): this client must use the database the synchronous client
        writes the marks and counters to."""
        options = parse_url(url)
        return cls(
            host=options.get("host") or "localhost",
            port=int(options.get("port") or 6379),
            db=int(options.get("db") or 0),
            username=options.get("username"),
            password=options.get("password"),
            timeout=socket_timeout,
            connect_timeout=socket_connect_timeout,
        )

    # --- Commands ------------------------------------------------------------------------------

    async def get(self, key) -> bytes | None:
        return await self.execute("GET", key)

    async def set(self, key, value, ex: int | None = None) -> bool:
        if ex is None:
            return await self.execute("SET", key, value) == b"OK"
        return await self.execute("SET", key, value, "EX", ex) == b"OK"

    async def delete(self, *keys) -> int:
        return await self.execute("DEL", *keys)

    async def mget(self, keys, *more) -> list[bytes | None]:
        names = [*keys, *more] if isinstance(keys, list | tuple) else [keys, *more]
        return await self.execute("MGET", *names)

    async def eval(self, script: str, numkeys: int, *keys_and_args) -> Any:
        return await self.execute("EVAL", script, numkeys, *keys_and_args)

    async def evalsha(self, sha: str, numkeys: int, *keys_and_args) -> Any:
        return await self.execute("EVALSHA", sha, numkeys, *keys_and_args)

    async def script_load(self, script: str) -> str:
        return (await self.execute("SCRIPT", "LOAD", script)).decode()

    async def aclose(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def send_now(self, *args) -> asyncio.Future | None:
        """The command written now, as ``execute`` writes it, for a caller that awaits the reply
        later (a request sends a command, then does other work while Redis answers). None when
        there is no open connection to write it on: the caller then uses ``execute``, which opens one."""
        if self._transport is None or (not self._waiting and self._closed_by_redis()):
            return None
        return self._send(args)

    def read_arrived(self) -> None:
        """Reads the replies already on the socket, now: a caller about to await a reply sent a
        while ago (``send_now``) finds it answered without a turn of the event loop, when Redis was
        quicker than the work done meanwhile. Reads what is there and never waits; what arrives
        later is read by the event loop as usual."""
        sock, protocol = self._socket, self._protocol
        if sock is None or protocol is None or not self._waiting:
            return
        try:
            data = sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return  # nothing yet
        except OSError:
            data = b""  # reset: as closed
        if not data:  # Redis closed the connection
            self._give_up(lambda: redis.ConnectionError("Connection to Redis lost"))
            return
        self._received(protocol, data)

    async def execute(self, *args) -> Any:
        if self._transport is not None and not self._waiting and self._closed_by_redis():
            self._give_up(lambda: redis.ConnectionError("Connection to Redis lost"))
        if self._transport is None:
            await self._connect()
        return await self._send(args)

    # --- The connection --------------------------------------------------------------------------

    def _send(self, args: tuple) -> asyncio.Future:
        try:
            packed = hiredis.pack_command(args)
        except TypeError as error:
            raise redis.DataError(str(error)) from error
        loop = asyncio.get_running_loop()
        reply = loop.create_future()
        idle = not self._waiting and not self._outgoing
        self._waiting.append((reply, loop.time()))
        if idle and self._transport is not None:
            # Nothing in flight: written at once (a lone request pays no extra turn of the loop).
            self._transport.write(packed)
        else:
            # Others in flight: written with every command issued until the loop turns.
            self._outgoing.append(packed)
            if not self._flush_scheduled:
                self._flush_scheduled = True
                loop.call_soon(self._flush)
        if self._watchdog is None:
            self._watchdog = loop.call_later(self.timeout, self._check_late, context=contextvars.Context())
        return reply

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._outgoing:
            return
        if self._transport is None:  # never left waiting: the commands fail as on a lost connection
            self._give_up(lambda: redis.ConnectionError("Connection to Redis lost"))
            return
        self._transport.write(b"".join(self._outgoing))
        self._outgoing.clear()

    async def _connect(self) -> None:
        # The requests that find no connection wait for the same attempt. One that has ended (every
        # caller may have left it: the cache gives up after 0.1 s) is never waited on again.
        connecting = self._connecting
        if connecting is None or connecting.done():
            connecting = self._connecting = asyncio.get_running_loop().create_task(
                self._open(), context=contextvars.Context()
            )
            connecting.add_done_callback(self._connect_done)
        await asyncio.shield(connecting)

    def _connect_done(self, connecting: asyncio.Task) -> None:
        if self._connecting is connecting:
            self._connecting = None
        if not connecting.cancelled():
            connecting.exception()  # retrieved: its callers may all have left

    def _closed_by_redis(self) -> bool:
        """With nothing waiting for a reply, anything to read means the connection is over: its end
        (Redis restarted, or closed an idle client) or bytes no command asked for."""
        if self._socket is None:
            return True
        try:
            self._socket.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False  # nothing to read: alive
        except OSError:
            pass
        return True

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            sock = await asyncio.wait_for(self._connected_socket(loop), self.connect_timeout)
            transport, protocol = await loop.create_connection(lambda: _Protocol(self), sock=sock)
        except TimeoutError as error:
            raise redis.TimeoutError(f"Timeout connecting to Redis at {self.host}:{self.port}") from error
        except OSError as error:
            raise redis.ConnectionError(
                f"Error connecting to Redis at {self.host}:{self.port}: {error.strerror or error}"
            ) from error
        self._transport, self._protocol, self._socket = transport, protocol, sock
        self._reader = hiredis.Reader(replyError=ResponseError)
        greeting = []
        if self._password is not None:
            credentials = (self._username, self._password) if self._username else (self._password,)
            greeting.append(self._send(("AUTH", *credentials)))
        if self.db:
            greeting.append(self._send(("SELECT", self.db)))
        try:
            for reply in greeting:
                await reply
        except ResponseError as error:
            self._give_up(lambda: redis.ConnectionError("Connection to Redis closed"))
            for reply in greeting:  # retrieved: the rest failed with the connection
                if reply.done() and not reply.cancelled():
                    reply.exception()
            raise AuthenticationError("Redis refused the credentials or the database number") from error

    async def _connected_socket(self, loop: asyncio.AbstractEventLoop) -> socket.socket:
        """A connected, non-blocking socket of this client's own (kept, to peek at): each address
        the host name has, in turn, as redis-py tries them."""
        addresses = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        error: OSError | None = None
        for family, kind, proto, _, address in addresses:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.sock_connect(sock, address)
            except OSError as refused:
                sock.close()
                error = refused
                continue
            except BaseException:
                sock.close()
                raise
            return sock
        raise error or OSError(f"no address for {self.host}")

    def _received(self, protocol: _Protocol, data: bytes) -> None:
        if protocol is not self._protocol:
            return  # a connection given up on
        self._reader.feed(data)
        while True:
            try:
                reply = self._reader.gets()
            except hiredis.ProtocolError:
                self._give_up(lambda: redis.ConnectionError("Redis sent a reply that cannot be read"))
                return
            if reply is False:
                return
            if not self._waiting:
                self._give_up(lambda: redis.ConnectionError("Redis sent a reply to no command"))
                return
            waiting, _ = self._waiting.popleft()
            if waiting.done():  # its caller left (cancelled): the reply is dropped
                continue
            if isinstance(reply, ResponseError):
                if str(reply).startswith("NOSCRIPT"):
                    reply = NoScriptError(str(reply))
                waiting.set_exception(reply)
            else:
                waiting.set_result(reply)

    def _lost(self, protocol: _Protocol) -> None:
        if protocol is self._protocol:
            self._give_up(lambda: redis.ConnectionError("Connection to Redis lost"))

    def _check_late(self) -> None:
        self._watchdog = None
        if not self._waiting:
            return
        loop = asyncio.get_running_loop()
        oldest = self._waiting[0][1]
        if loop.time() - oldest >= self.timeout:
            self._give_up(lambda: redis.TimeoutError("Timeout reading from Redis"))
        else:
            self._watchdog = loop.call_at(oldest + self.timeout, self._check_late)

    def _give_up(self, error) -> None:
        """Closes the connection and fails every command waiting on it with ``error()``."""
        transport, self._transport, self._protocol, self._socket = self._transport, None, None, None
        if transport is not None:
            transport.close()
        waiting, self._waiting = self._waiting, collections.deque()
        self._outgoing.clear()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        for reply, _ in waiting:
            if not reply.done():
                reply.set_exception(error())
