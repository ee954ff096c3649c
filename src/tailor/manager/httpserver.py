"""The manager's HTTP server settings: one function, :func:`uvicorn_settings`, used by ``tailor manager``
(tailor.manager.server) and by the test server (tailor.manager.testing), so both run with the same bounds.

uvicorn 0.54 alone bounds neither the connections nor the time a client takes to send a request or to take its
answer: no header, body or write timeout, and ``limit_concurrency`` answers 503 only once a request's headers have
arrived, so it neither closes a slow connection nor refuses one at accept; once slow connections reach it, every
client's request is answered 503 while they keep their sockets (found by review, 2026-12-07: a client sending a
header byte every few seconds, or a Content-Length and then a trickled body, kept its socket and task for good). So
the manager runs uvicorn's h11 protocol with four bounds of its own (:class:`BoundedH11Protocol`):

* at most ``max_connections`` open connections: one more is aborted at accept, before anything is read (over TLS,
  once its handshake is done: whatever it sent with its handshake is dropped, never handed to the application);
* at most ``max_per_address`` of them from one client address (an IPv6 client's /64, which one client may hold
  whole; 0: no such bound), refused the same way, so that one client cannot take the whole cap from the others (until 2026-12-07 one address could hold every connection: found
  by review). Behind a reverse proxy or a NAT every client has the proxy's address: raise it or set 0 there;
* a request's headers must be complete within ``header_timeout_s`` of the connection's accept or the end of the
  previous response on it (idle keep-alive connections are closed after uvicorn's 5 s keep-alive timeout);
* a request's body must be complete within ``body_timeout_s`` of the end of its headers;
* a client must take what the server writes: while the server waits on it (the connection's write buffer above its
  high-water mark, so the application's next send waits, or the connection closing, by either side, and not yet
  gone), it must take at least ``WRITE_PROGRESS_BYTES`` of it every ``write_timeout_s``, else the connection is
  aborted; a closing connection with nothing left to send is aborted after one ``write_timeout_s`` (a TLS close
  waiting on the client's close_notify). Progress is measured, and the abort done, on the TCP transport: over TLS,
  asyncio's TLS transport counts only what its TLS layer holds, not the TCP transport's buffer below it. (Until
  2026-12-07 no deadline ran while a response was written, and asyncio's ``close()`` waits for the buffer to
  drain for good: a client pipelining ``GET /healthz`` and reading nothing held its connection, and once the cap was
  reached everyone was refused; over TLS a client that sent close_notify with a large answer unread held its
  connection for good the same way (asyncio ends its TLS shutdown at the client's close_notify and then closes the
  TCP transport, draining without limit), and uvicorn's shutdown, closing that connection a second time, crashed
  the server before the application's shutdown ran; found by review.)

A connection past a header or body deadline is answered ``408 Request Timeout`` (when part of a request has arrived
and no response has started; an idle one is closed without a word) and closed, the write deadline then bounding
its close. Every refusal is counted in ``tailor_http_refused_connections_total{reason="connections"|"address"|
"header_timeout"|"body_timeout"|"write_timeout"}`` (``write_timeout`` only when output was still buffered);
``tailor_http_connections`` is the number open. Pipelined
requests need no bound of their own: uvicorn stops reading at a pipelined request until the current response is
done (each read in between, one per receive() of the application, is paused again at once), and a client that
pipelines and reads nothing meets the write deadline. What these bounds do not cover: a TLS handshake (asyncio's
own 60 s handshake timeout applies; a connection is counted only once its handshake is done) and the time the
application takes to answer (its own bounds: the long-poll's ``max_wait_s``, the telemetry ack timeout).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import Counter

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from tailor.manager.config import ManagerConfig

KEEP_ALIVE_S = 5  # uvicorn's default: an idle keep-alive connection is closed after this long
MAX_HEADER_BYTES = 16 * 1024  # h11's default bound of a request line plus headers (larger: 400)
BACKLOG = 1024  # the listening socket's accept queue (the kernel caps it at net.core.somaxconn)
WRITE_PROGRESS_BYTES = 64 * 1024  # a client the server waits on takes at least this much per write_timeout_s


def _tcp_transport(transport: asyncio.Transport) -> asyncio.Transport:
    """The TCP transport under ``transport``: over TLS (asyncio's ``_SSLProtocolTransport``), its SSL protocol's
    own transport (set before the handshake, so there by the application protocol's ``connection_made``)."""
    tcp = getattr(getattr(transport, "_ssl_protocol", None), "_transport", None)
    return tcp if tcp is not None else transport


class _Transport:
    """A connection's transport as uvicorn sees it: counts the bytes written (so the write deadline can tell a
    slow client from a stalled one), measures what is still buffered down to the TCP transport, aborts the TCP
    transport too, and on every ``close()`` (uvicorn's, after a response, a 400, the keep-alive timeout, an
    application's error or a shutdown, and this module's) starts the write deadline (asyncio's ``close()`` waits
    for the buffer to drain, however long that takes). A ``close()`` of a transport already closing is not passed
    on: asyncio's TLS transport, closed already by the client's close_notify, drops its protocol on a second
    ``close()`` (its next ``get_write_buffer_size()`` then raises AttributeError)."""

    def __init__(self, transport: asyncio.Transport, protocol: BoundedH11Protocol):
        self._transport = transport
        self._protocol = protocol
        self.tcp = _tcp_transport(transport)
        self.tls = self.tcp is not transport
        self.written = 0

    def write(self, data) -> None:
        if not (self.tls and self._transport.is_closing()):  # asyncio's TLS transport drops it once closing
            self.written += len(data)
        self._transport.write(data)

    def writelines(self, list_of_data) -> None:
        for data in list_of_data:
            self.write(data)

    def buffered(self) -> int:
        """Bytes written and not yet handed to the kernel: the TLS layer's and the TCP transport's."""
        total = 0
        for t in (self._transport, self.tcp) if self.tls else (self._transport,):
            try:
                total += t.get_write_buffer_size()
            except AttributeError:  # asyncio's TLS transport after a second close() (not passed on here, but guarded)
                pass
        return total

    def closing(self) -> bool:
        return self._transport.is_closing() or self.tcp.is_closing()

    def close(self) -> None:
        if not self._transport.is_closing():
            self._transport.close()
        self._protocol._write_watch()

    def abort(self) -> None:
        try:
            self._transport.abort()
        finally:
            if self.tls:  # the TCP transport too: its buffer is dropped, connection_lost follows
                self.tcp.abort()

    def __getattr__(self, name):  # everything else is the transport's own
        return getattr(self._transport, name)


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a cap on open connections, deadlines for a request's headers and body, and a
    write deadline for the client to take what the server writes.

    A subclass made by :func:`protocol_class` sets ``max_connections``, ``max_per_address``, ``header_timeout_s``,
    ``body_timeout_s``, ``write_timeout_s``, ``metrics`` and its own ``per_address`` (the open connections per client
    address of the server it serves); uvicorn makes one instance per connection."""

    max_connections: int = 1024
    max_per_address: int = 0  # 0: no bound per client address
    per_address: Counter = Counter()  # client address -> open connections (protocol_class gives each server its own)
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    write_timeout_s: float = 30.0
    metrics = None  # tailor.manager.metrics.Metrics

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._refused = False
        self._lost = False
        self._phase: str | None = None  # "header" or "body": the part of a request the client is sending
        self._timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._write_mark = 0  # bytes the client had taken when the write deadline was armed
        self._address: str | None = None  # the client address this connection counts against

    # -- connections
    def connection_made(self, transport) -> None:
        if len(self.connections) >= self.max_connections:  # refused before anything is read, and counted
            self._refused = True
            self._count("connections")
            # abort, not close: a TLS close() would still hand what came with the handshake to data_received
            transport.abort()
            return
        address = _address(transport) if self.max_per_address else None
        if address is not None and self.per_address[address] >= self.max_per_address:
            self._refused = True
            self._count("address")
            transport.abort()
            return
        if address is not None:
            self._address = address
            self.per_address[address] += 1
        super().connection_made(_Transport(transport, self))
        self._gauge()
        self._watch()

    def connection_lost(self, exc) -> None:
        if self._refused:  # never set up: nothing of uvicorn's to tear down
            return
        self._lost = True
        if self._address is not None:
            self.per_address[self._address] -= 1
            if self.per_address[self._address] <= 0:
                del self.per_address[self._address]
            self._address = None
        self._set_timer(None)
        self._cancel_write_timer()
        super().connection_lost(exc)
        self._gauge()

    def data_received(self, data: bytes) -> None:
        if self._refused:  # a refused connection's bytes reach no request
            return
        super().data_received(data)
        self._watch()

    def eof_received(self) -> None:
        if self._refused:
            return
        super().eof_received()
        # the client ended its side (TCP FIN, or a TLS close_notify): asyncio closes the transport itself next, not
        # through uvicorn's close(); the write deadline bounds that close too
        self.loop.call_soon(self._write_watch)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    # -- the write deadline
    def pause_writing(self) -> None:
        if self._refused:
            return
        super().pause_writing()  # uvicorn's flow control: the application's next send waits
        self._write_watch()

    def resume_writing(self) -> None:
        if self._refused:
            return
        super().resume_writing()
        if not self._waiting_on_client():  # closing: the deadline runs on, from its mark
            self._cancel_write_timer()

    def _waiting_on_client(self) -> bool:
        """The server waits on the client: the application's next send waits, or the connection is closing and
        connection_lost has not come (output still buffered, or a TLS close waiting on the client)."""
        if self._lost or self.transport is None:
            return False
        return self.flow.write_paused or self.transport.closing()

    def _taken(self) -> int:
        """Bytes of the connection's output the client has taken (for TLS, roughly: plaintext written less what
        the TLS layer and the TCP transport still hold)."""
        return self.transport.written - self.transport.buffered()

    def _write_watch(self) -> None:
        """Arm the write deadline when the server waits on the client (none armed yet)."""
        if self._write_timer is None and self._waiting_on_client():
            self._write_mark = self._taken()
            self._write_timer = self.loop.call_later(self.write_timeout_s, self._write_expired)

    def _cancel_write_timer(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_expired(self) -> None:
        self._write_timer = None
        if not self._waiting_on_client():
            return
        buffered = self.transport.buffered()
        if buffered and self._taken() - self._write_mark >= WRITE_PROGRESS_BYTES:  # slow but taking it: on
            self._write_watch()
            return
        if buffered:  # (a close with nothing buffered, waiting on a TLS close_notify, is no write timeout)
            self._count("write_timeout")
        self.transport.abort()  # dropped, down to the TCP transport (connection_lost wakes the application's send)

    # -- deadlines
    def _watch(self) -> None:
        """Arm the deadline of the part of a request the client is sending (none while the app answers); a
        deadline runs from the start of its part, however many bytes arrive meanwhile."""
        if self.transport is None or self.transport.is_closing():
            self._set_timer(None)
            return
        state = self.conn.their_state
        phase = "header" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        if phase != self._phase:
            self._set_timer(phase)

    def _set_timer(self, phase: str | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._phase = phase
        if phase is not None:
            delay = self.header_timeout_s if phase == "header" else self.body_timeout_s
            self._timer = self.loop.call_later(delay, self._expired, phase)

    def _expired(self, phase: str) -> None:
        self._timer = None
        if self.transport is None or self.transport.is_closing() or self._phase != phase:
            return
        self._count(f"{phase}_timeout")
        if phase == "body":
            answer = self.cycle is None or not self.cycle.response_started
        else:  # a connection idle since its accept or its last response is closed without a word (as nginx does)
            answer = bool(self.conn.trailing_data[0])
        if answer:  # bypasses h11 (it cannot answer before a request's headers); the connection ends here
            limit = self.header_timeout_s if phase == "header" else self.body_timeout_s
            text = f"request {phase}s not complete within {limit:g} s\n".encode()
            self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                                 b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(text), text))
        # the app's pending receive() gets http.disconnect; output still buffered: the write deadline bounds the close
        self.transport.close()

    # -- metrics
    def _count(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.http_refused.labels(reason).inc()

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.http_connections.set(len(self.connections))


def _address(transport: asyncio.BaseTransport) -> str | None:
    """The connection's client address as the per-address cap counts it: an IPv4 address (IPv4-mapped IPv6 ones
    too), an IPv6 address's /64 (a client commonly holds a whole /64, and Tailor keys IPv6 clients by it); None
    when the transport has none (a Unix socket)."""
    peer = transport.get_extra_info("peername")
    if not isinstance(peer, tuple) or not peer or not isinstance(peer[0], str):
        return None
    try:
        ip = ipaddress.ip_address(peer[0].split("%", 1)[0])  # (a scope id: fe80::1%eth0)
    except ValueError:
        return peer[0]
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ipaddress.ip_network(f"{ip}/64", strict=False)) if ip.version == 6 else str(ip)


def protocol_class(cfg: ManagerConfig, metrics) -> type[BoundedH11Protocol]:
    """A :class:`BoundedH11Protocol` with ``cfg``'s bounds, counting into ``metrics`` (a class per server: its own
    count per client address)."""
    return type("ManagerH11Protocol", (BoundedH11Protocol,),
                {"max_connections": cfg.max_connections, "max_per_address": cfg.max_connections_per_address,
                 "per_address": Counter(), "header_timeout_s": cfg.header_timeout_s,
                 "body_timeout_s": cfg.body_timeout_s, "write_timeout_s": cfg.write_timeout_s, "metrics": metrics})


def uvicorn_settings(cfg: ManagerConfig, metrics) -> dict:
    """Keyword arguments of ``uvicorn.run`` / ``uvicorn.Config`` for a manager with ``cfg`` (its bounds) and
    ``metrics`` (its counters): the same for the real server and the test server."""
    return {"http": protocol_class(cfg, metrics),
            # asyncio's loop, pinned: the write deadline over TLS reads asyncio's TLS transport (its SSL protocol's TCP
            # transport, _tcp_transport); "auto" would take uvloop where it is installed (uvicorn[standard])
            "loop": "asyncio",
            "ws": "none",  # the manager has no WebSocket endpoint
            "backlog": BACKLOG, "timeout_keep_alive": KEEP_ALIVE_S, "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
            "log_config": None, "access_log": False}
