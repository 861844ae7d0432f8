"""The gunicorn worker of a registry node: gevent, closing connections so that the answer arrives.

It imports neither Django nor the project at load (gunicorn's master process loads the worker class
before it forks; the application itself is loaded in the worker, see ``deploy/gunicorn.conf.py``).
What it changes in gunicorn's gevent worker, and why:

* **No client takes the node off the network by holding connections.** Every accepted connection is
  admitted or refused before a byte of it is read (``registry/serving/connections.py``: a cap per client
  address and one in all, below ``worker_connections``; a refused one gets a 503 and is closed). A new
  connection must send its request head within the header timeout (Tomcat's ``connectionTimeout``, 20 s),
  a kept-alive one its next request within the keep-alive time, shortened to the header timeout while most
  of the cap is in use; request bodies are read under their own deadlines before a view runs
  (``registry/wire/request_bodies.py``). Answers have a deadline too: a write the socket does not take at
  once is watched (``SLOW_READERS``), and the sweeper that ends idle waits resets a client that takes
  nothing of its answer for the write timeout, sheds the readers blocked longest near the connection cap
  and bounds what such readers hold; at the cap, a new connection is admitted in place of the reader
  blocked longest. docs/security.md lists these limits.
* **Error answers arrive.** gunicorn's gevent worker closes a connection at once after an error answer
  (an over-long request line, bad chunk framing) or a response that ends the connection. A client
  still sending its request (a Java client writes the request line, the headers and the body before
  it reads) then gets a reset instead of the 414 or 413 it was sent. This worker closes the RFC 9112
  §9.6 way, as gunicorn's sync and gthread workers do: half-close, read and discard what the client is
  still sending (at most ``DRAIN_BYTES`` within ``DRAIN_SECONDS``), then close.
* **Refusing a body never means reading it.** gunicorn discards an unread request body before the next
  request on a keep-alive connection, however long it is; here a body left unread by more than
  ``DRAIN_BYTES`` (a chunked body refused with 413 at the size limit, say) closes the connection.
* **A stop does not wait for idle connections.** gunicorn waits for every open connection up to
  ``graceful_timeout``, so clients that keep their connection between heartbeats (every Java client)
  hold the whole stop. Here a connection waiting for its next request is closed when the stop begins
  (a request in progress is still answered, unless its client has taken nothing of the answer for a
  second), so a node stops in about a second and a restart or rolling deploy is not held up.
* **Connections take turns.** A greenlet that has answered a request reads the next one at once, and if
  its client already sent it (a client that sends its next request as soon as it has an answer, a
  pipelined batch) that read does not go through the event loop: one connection would be served again
  and again while the others' requests wait. So a connection whose last request was read and answered
  without the loop polling once gives the loop a turn before it reads the next (``_NextRequestWait``);
  a connection whose requests come apart pays nothing.
* **Work gunicorn repeats for every request is done once**, as its result does not change: which peers
  may set forwarding headers is kept per address (gunicorn parses the address with ``ipaddress`` each
  time); one ``wsgi.errors`` object per worker, which finds the log's streams when written to, so a
  reopened log file is still followed (gunicorn builds one per request, looking the error logger up
  under the logging module's lock); the ``Date`` header is formatted once a second; a small write is
  one ``send`` (gevent's ``sendall`` asks the socket for its buffer size, a system call, each time);
  and the wait for a connection's next request arms no timer (gunicorn makes and closes a gevent
  ``Timeout`` per request): a wait notes when it began, and one sweeper ends the waits past the
  keep-alive time.
"""

from __future__ import annotations

import errno
import functools
import logging
import sys
import time

import gevent
from gevent.pool import Pool
from gunicorn import util
from gunicorn.http import message, wsgi
from gunicorn.http.errors import (
    ConfigurationProblem,
    InvalidResponseHeader,
    InvalidResponseHeaderName,
    ParseException,
)
from gunicorn.workers import ggevent
from gunicorn.workers.ggevent import GeventWorker

DRAIN_BYTES = 64 * 1024
DRAIN_SECONDS = 2.0
# How long a connection served twice within one turn of the event loop yields: any timer makes the
# loop poll its sockets before it expires (the payload builds' pause waits longer still, for an idle
# turn: registry/cache/pacing.py; this module imports nothing of the project at load).
FAIR_TURN_S = 0.000_01
_READ_STEP = 8192
# Parse errors gunicorn answers 500: the application's or the configuration's, not a malformed request.
NOT_THE_CLIENTS = (InvalidResponseHeader, InvalidResponseHeaderName, ConfigurationProblem)
# The sweeper closes this many slow readers, then gives the event loop a turn: thousands that went
# quiet together are closed without holding every other connection's requests.
CLOSE_BATCH = 100


# Addresses whose trust was decided; a fleet is thousands of addresses, a scan could be millions.
REMEMBERED_PEERS = 65536


class RememberedTrust:
    """gunicorn's ``_ip_in_allow_list(ip, allow_list, networks)`` with its answers kept per address and
    allow list (the networks are parsed from the allow list), at most REMEMBERED_PEERS of them."""

    def __init__(self, decide):
        self.decide = decide
        self.answers: dict = {}

    def __call__(self, ip_str, allow_list, networks):
        key = (ip_str, tuple(allow_list))
        answer = self.answers.get(key)
        if answer is None:
            if len(self.answers) >= REMEMBERED_PEERS:
                self.answers.clear()
            answer = self.answers[key] = self.decide(ip_str, allow_list, networks)
        return answer


def remember_peer_trust(decide):
    return decide if isinstance(decide, RememberedTrust) else RememberedTrust(decide)


message._ip_in_allow_list = remember_peer_trust(message._ip_in_allow_list)


def _port_of(sock) -> int | None:
    address = sock.getsockname()
    return address[1] if isinstance(address, tuple) else None


# gunicorn's own class and function, also when this module is imported again (tests reload it).
_GunicornErrors = getattr(wsgi.WSGIErrorsWrapper, "gunicorn_class", wsgi.WSGIErrorsWrapper)
_gunicorn_write = getattr(util.write, "gunicorn_write", util.write)
_gunicorn_write_chunk = getattr(util.write_chunk, "gunicorn_write_chunk", util.write_chunk)
_gunicorn_http_date = getattr(util.http_date, "format_date", util.http_date)


class SharedErrors(_GunicornErrors):
    """``wsgi.errors`` for every request of a worker: the streams gunicorn's wrapper would write to
    (standard error when the error log is "-", and the error logger's handlers' streams), looked up
    when something is written rather than when a request starts."""

    def __init__(self, cfg):  # no super().__init__: it would look the streams up now
        self.cfg = cfg

    @property
    def streams(self) -> list:
        handlers = logging.getLogger("gunicorn.error").handlers
        found = []
        if self.cfg.errorlog == "-":
            found.append(sys.stderr)
            handlers = handlers[1:]
        found.extend(handler.stream for handler in handlers if hasattr(handler, "stream"))
        return found


class _ErrorsPerConfig:
    """Stands for gunicorn's ``WSGIErrorsWrapper(cfg)``: the same object for the same configuration."""

    gunicorn_class = _GunicornErrors

    def __init__(self):
        self._cfg = None
        self._errors = None

    def __call__(self, cfg) -> SharedErrors:
        if cfg is not self._cfg:
            self._cfg, self._errors = cfg, SharedErrors(cfg)
        return self._errors


class HttpDatePerSecond:
    """gunicorn's ``http_date``, the current date formatted once per second (the header has no finer
    resolution); a given timestamp is formatted as gunicorn does."""

    def __init__(self, format_date, clock=time.time):
        self.format_date = format_date
        self.clock = clock
        self._second = None
        self._text = ""

    def __call__(self, timestamp=None) -> str:
        if timestamp is not None:
            return self.format_date(timestamp)
        second = int(self.clock())
        if second != self._second:
            self._second, self._text = second, self.format_date(second)
        return self._text


# One send takes a response this small whole, as a rule (the socket's send buffer is far larger).
SMALL_WRITE = 64 * 1024
# A larger body goes in slices this big, with a turn of the event loop between two once the pacer's
# slice of time is used up: a single send of a whole registry into a loopback socket's buffer is
# kernel copying during which every heartbeat waits, while a turn after every slice takes a large
# share of the full fetches a CPU-second serves. One turn, not the builds' pause
# (registry/cache/pacing.py), which waits for an idle loop: a body being sent is a request being
# served, not background work.
SEND_SLICE = 256 * 1024
# Over TLS: four records.
TLS_SEND_SLICE = 64 * 1024

# The worker's slow readers (registry/serving/connections.py ``SlowReaders``), set when it serves: a
# write the socket does not take at once is noted there, and the sweeper closes it if its reader
# stops reading. None elsewhere (another worker class, tests): writes then block as gunicorn's do.
SLOW_READERS = None


class ReaderTooSlow(ConnectionResetError):
    """Thrown into a connection's greenlet blocked in a write that the sweeper closes (its reader took
    nothing for the write timeout, or it was shed): gunicorn ends the connection as after a reset by
    the client, quietly, and its socket, set to reset, frees what the kernel still held of it."""


def write_small_at_once(sock, data, chunked=False):
    """gunicorn's ``util.write``: a small write is one ``send`` (gevent's ``sendall`` asks the socket
    for its buffer size at every call); what the socket does not take at once is sent in slices, paced,
    and, in this worker, as a write ``SLOW_READERS`` watches."""
    if chunked:  # gunicorn's write_chunk: the chunk's size line, the data, its end
        if isinstance(data, str):
            data = data.encode()
        data = b"".join((b"%X\r\n" % len(data), data, b"\r\n"))
    size = len(data)
    if not size:  # an empty body: nothing to send (gunicorn's sendall makes no call either)
        return
    slow_readers = SLOW_READERS
    sent = 0
    if slow_readers is not None and size > SMALL_WRITE:
        from registry.serving.connections import limit_unsent

        limit_unsent(sock)  # before the first send: the kernel takes little more than a window of it
    if size <= SEND_SLICE:
        if slow_readers is None:
            sent = sock.send(data)
        else:
            # Not waiting for room in the socket (gevent's send would): a client that left earlier
            # answers unread would hold this one unwatched.
            try:
                sent = _send_now(sock, data)
            except BlockingIOError:
                sent = 0
        if sent == size:
            return
    write = None if slow_readers is None else slow_readers.begin(gevent.getcurrent(), data, sock)
    try:
        _send_rest(sock, memoryview(data), sent, write, slow_readers)
    finally:
        if write is not None:
            slow_readers.end(write)


def _send_now(sock, data) -> int:
    """What the socket takes of ``data`` without waiting. gevent's TLS socket ignores send's timeout
    and waits while its own is None: it is given a timeout of 0 for the call (what OpenSSL took of a
    record it keeps, and the next send of the same bytes goes on from there)."""
    if getattr(sock, "_sslobj", None) is None:
        return sock.send(data, 0, 0.0)
    sock.settimeout(0.0)
    try:
        return sock.send(data)
    finally:
        sock.settimeout(None)


def _send_rest(sock, view, sent, write, slow_readers) -> None:
    # Imported here: the master loads this module before it forks, and loads nothing of the project.
    from registry.cache.pacing import PACER

    # A pause is set only where the event loop serves (gevent); another worker class just sends.
    turns = PACER.pause is not None and len(view) > SEND_SLICE
    turn_at = time.perf_counter() + PACER.slice_s
    first = True
    # A TLS send returns only once its whole slice is written: smaller slices let the slow readers'
    # watch see a reader that takes its answer slowly moving.
    step = SEND_SLICE if getattr(sock, "_sslobj", None) is None else TLS_SEND_SLICE
    while sent < len(view):
        if turns and not first and time.perf_counter() >= turn_at:
            gevent.sleep(FAIR_TURN_S)
            turn_at = time.perf_counter() + PACER.slice_s
        first = False
        # gevent's send waits for room in the socket, then sends what fits.
        taken = sock.send(view[sent : sent + step])
        if taken and write is not None:
            slow_readers.moved(write)
        sent += taken


def _write_chunk(sock, data):
    write_small_at_once(sock, data, chunked=True)


write_small_at_once.gunicorn_write = _gunicorn_write
_write_chunk.gunicorn_write_chunk = _gunicorn_write_chunk
wsgi.WSGIErrorsWrapper = _ErrorsPerConfig()
util.http_date = HttpDatePerSecond(_gunicorn_http_date)
util.write = write_small_at_once
# The end of a chunked answer (resp.close) goes the same watched way.
util.write_chunk = _write_chunk


def _fully_read(body) -> bool:
    """Whether a gunicorn request body has been read to its end, known without touching the socket.

    The usual case (the application read the whole body, or there was none) is then settled without
    arming a timer for every request. Anything this cannot tell goes the timed way.
    """
    buffered = getattr(body, "buf", None)
    reader = getattr(body, "reader", None)
    if buffered is None or reader is None or buffered.tell():
        return False
    # A Content-Length body with nothing left, or a chunked body whose last chunk was parsed.
    return getattr(reader, "length", None) == 0 or getattr(reader, "parser", True) is None


def discard_unread_body(body) -> bool:
    """Read what is left of a request body, up to ``DRAIN_BYTES`` within ``DRAIN_SECONDS``; False when
    the connection cannot serve another request (body longer or slower than that, or badly framed)."""
    if body is None or _fully_read(body):
        return True
    if getattr(body, "failed", False):
        return False
    discarded = 0
    timer = gevent.Timeout(DRAIN_SECONDS)
    try:
        with timer:
            while discarded <= DRAIN_BYTES:
                data = body.read(_READ_STEP)
                if not data:
                    return True
                discarded += len(data)
    except gevent.Timeout as timeout:
        if timeout is not timer:
            raise
    except Exception:  # the body's framing is broken: where the next request starts is unknown
        pass
    return False


class NextRequestNotComing(Exception):
    """Thrown into a connection's greenlet that waited its keep-alive time (or that a stop ends):
    the wait ends quietly and gunicorn closes the connection, as after its own keep-alive timeout."""


class _NextRequestWait:
    """The wait for a connection's next request (gunicorn's keep-alive timeout).

    gunicorn arms a gevent ``Timeout`` for every wait: a loop timer made and closed per request.
    Here a wait only notes when it began
    (``RegistryWorker.waiting``); one sweeper ends the waits that are past the keep-alive time, and a
    stop ends them all."""

    __slots__ = ("_worker",)

    def __init__(self, worker: RegistryWorker):
        self._worker = worker

    def __enter__(self):
        worker = self._worker
        current = gevent.getcurrent()
        loop = worker.event_loop
        if loop is None:
            # The worker's loop, known once it serves; libev counts its iterations (its polls).
            loop = worker.event_loop = gevent.get_hub().loop
        turns = worker.turns
        previous = turns.get(current)
        if previous == loop.iteration:
            # This connection's last request was read and answered without the loop polling
            # once. Its client's next request may be here already, and reading it now would serve
            # this connection again and again while the others' requests wait (a long latency
            # tail). A timer expires only after a poll: the
            # connections whose requests came meanwhile are served first, one request each.
            gevent.sleep(FAIR_TURN_S)
        # Checked after the turn, and with no switch before the wait is noted: a stop that began
        # during the turn has ended the waits noted then, and would not see this one.
        if not worker.alive:
            raise StopIteration("the worker is stopping")
        if worker.sweeper is None:
            worker.sweeper = gevent.spawn(worker.sweep_waits)
        turns[current] = loop.iteration
        # When the wait began, and whether it is a new connection's first (given the header timeout,
        # not the keep-alive time). A new tuple per wait: the sweeper tells this wait from the
        # connection's next by identity.
        worker.waiting[current] = (time.monotonic(), previous is None)
        return self

    def __exit__(self, kind, value, traceback):
        self._worker.waiting.pop(gevent.getcurrent(), None)
        return kind is NextRequestNotComing


class AdmittingPool(Pool):
    """The pool of a listener's connection greenlets, which admits a connection before it spawns one
    for it (``registry/serving/connections.py``): a refused connection costs an accept and a send,
    no greenlet, so a flood of them delays the accept queue, and the heartbeats in it, the least.

    gevent's server calls ``spawn(serve, handle, close, (client, address))`` from its accept loop."""

    def __init__(self, size, worker: RegistryWorker):
        super().__init__(size)
        self.worker = worker

    def spawn(self, serve, handle, close, args):
        admission = self.worker.admission
        if admission is None:
            return super().spawn(serve, handle, close, args)
        client, address = args
        admitted, ticket = admission.admit(address[0] if isinstance(address, tuple) else None)
        if not admitted:
            self.worker.refuse(client, address, ticket)
            return None
        return super().spawn(self._serve_admitted, serve, handle, close, args, ticket)

    def _serve_admitted(self, serve, handle, close, args, ticket: str) -> None:
        try:
            serve(handle, close, args)
        finally:
            self.worker.admission.release(ticket)


class RegistryWorker(GeventWorker):
    """gunicorn's gevent worker with a graceful close and a prompt stop (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Greenlets waiting for a connection's next request -> when that wait began.
        self.waiting: dict = {}
        self.sweeper = None
        self._next_request_wait = _NextRequestWait(self)
        # Read once: gunicorn's settings are looked up through __getattr__, and these were read for
        # every request.
        self.keepalive_s = self.cfg.keepalive
        self.h2c_upgrades = getattr(self.cfg, "http2_cleartext", "off") in ("upgrade", "both")
        # Connections' greenlets -> the loop iteration in which their last wait for a request began
        # (``_NextRequestWait``); the loop is looked up at the first wait.
        self.turns: dict = {}
        self.event_loop = None
        # Set when the worker runs (``use_connection_limits``): without them, no connection is
        # refused and a new connection's first request may take the keep-alive time.
        self.admission = None
        self.header_timeout_s = 0.0
        # Which refusals get a log line (registry/domain/refusals.py), set with the limits.
        self.refusal_lines = None
        # Set when the worker runs, as the admission (registry/serving/connections.py SlowReaders).
        self.slow_readers = None
        # With EUREKA_TLS_CERT_FILE (``use_tls``): the context for new connections (registry/serving/
        # tls.py RotatingContext), the listeners that speak TLS (all but EUREKA_TLS_PLAIN_PORT's), and
        # the TLS connections' greenlets -> their verified client certificate (DER) or None.
        self.tls = None
        self.tls_listeners: frozenset[int] = frozenset()
        self.tls_connections: dict = {}

    def run(self):
        self.use_connection_limits()
        self.use_tls()
        # gunicorn's run() makes each listener's pool of connection greenlets from this name.
        ggevent.Pool = functools.partial(AdmittingPool, worker=self)
        super().run()

    def use_connection_limits(self) -> None:
        """The caps and the header timeout of EUREKA_MAX_CONNECTIONS(_PER_ADDRESS) and
        EUREKA_HEADER_TIMEOUT_SECONDS, and the slow readers' limits of EUREKA_WRITE_TIMEOUT_SECONDS and
        EUREKA_SLOW_READERS_MAX_BYTES (registry/serving/connections.py). Read once the application is
        loaded (in the worker: the master loads nothing of the project)."""
        global SLOW_READERS
        from django.conf import settings

        from registry.access.clients import is_trusted_proxy
        from registry.domain.refusals import RefusalLines
        from registry.serving import connections

        self.refusal_lines = RefusalLines(settings.EUREKA.process.refusal_log_interval_seconds)
        limits = settings.EUREKA.connections
        max_total = limits.max_total
        # Below worker_connections, so that the worker always accepts and can answer a refusal.
        ceiling = max(1, self.worker_connections - max(1, self.worker_connections // 10))
        if not max_total or max_total > ceiling:
            if max_total:
                self.log.warning(
                    "EUREKA_MAX_CONNECTIONS=%s is not below worker_connections=%s: using %s",
                    max_total,
                    self.worker_connections,
                    ceiling,
                )
            max_total = ceiling
        self.slow_readers = SLOW_READERS = connections.SLOW_READERS = connections.SlowReaders(
            limits.write_timeout_s, limits.slow_readers_max_bytes
        )
        self.admission = connections.CURRENT = connections.ConnectionAdmission(
            limits.max_per_address, max_total, exempt=is_trusted_proxy, make_room=self.shed_slowest_reader
        )
        self.header_timeout_s = limits.header_timeout_s

    def use_tls(self) -> None:
        """HTTPS on every listener but EUREKA_TLS_PLAIN_PORT's, when EUREKA_TLS_CERT_FILE is set: the
        worker wraps each admitted connection itself with the context of registry/serving/tls.py (gunicorn's
        own TLS would build a context per connection and read the files each time)."""
        from django.conf import settings
        from gevent import ssl as gevent_ssl

        from registry.serving import tls

        config = settings.EUREKA.tls
        if not config.enabled:
            return
        build = functools.partial(tls.server_context, context_class=gevent_ssl.SSLContext)
        self.tls = tls.RotatingContext(tls.TlsFiles.of(config), build=build)
        plain = config.plain_port
        self.tls_listeners = frozenset(
            id(sock) for sock in self.sockets if not (plain and _port_of(sock) == plain)
        )
        # gunicorn's sendfile would write a static file's bytes past TLS, in the clear.
        self.cfg.set("sendfile", False)
        self.wsgi = self._with_tls_environ(self.wsgi)
        # gunicorn's "Listening at" line says http:// of every listener.
        self.log.info(
            "HTTPS on %s (client certificates: %s)%s",
            ", ".join(str(s.getsockname()) for s in self.sockets if id(s) in self.tls_listeners),
            config.client_auth,
            f"; plain HTTP on port {plain}" if plain else "",
        )

    def _with_tls_environ(self, application):
        connections = self.tls_connections
        unknown = object()

        def tls_environ(environ, start_response):
            # Only a TLS connection's greenlet is in ``connections``.
            cert = connections.get(gevent.getcurrent(), unknown)
            if cert is not unknown:
                environ["wsgi.url_scheme"] = "https"
                if cert is not None:
                    environ["eureka.client_cert"] = cert
            return application(environ, start_response)

        return tls_environ

    def handle(self, listener, client, addr):
        greenlet = gevent.getcurrent()
        try:
            if id(listener) in self.tls_listeners:
                client = self._handshake(client, addr)
                if client is None:
                    return
            super().handle(listener, client, addr)
        finally:
            self.turns.pop(greenlet, None)
            self.tls_connections.pop(greenlet, None)

    def _handshake(self, client, addr):
        """The TLS connection over an admitted ``client``, or None when it was refused (and closed): plain
        HTTP (answered 400), a handshake that is not over within the header timeout, or that fails."""
        import socket
        import ssl

        from registry.serving import tls

        limit = self.wait_limits()[0]
        timer = gevent.Timeout(limit) if limit else None
        sock = client
        if timer is not None:
            timer.start()
        try:
            # A TLS connection starts with a handshake record (22); anything else is not TLS.
            first = client.recv(1, socket.MSG_PEEK)
            if not first:
                util.close(client)
                return None
            if first != b"\x16":
                self._refuse_plain_http(client, addr)
                return None
            sock = self.tls.current().wrap_socket(client, server_side=True, do_handshake_on_connect=False)
            sock.do_handshake()
        except gevent.Timeout as timeout:
            if timeout is not timer:
                raise
            util.close(sock)
            self._log_tls_refusal(tls.HANDSHAKE_TIMEOUT, addr)
            return None
        except ssl.SSLError as error:
            util.close(sock)
            if tls.client_left(error):
                return None
            kind = tls.refusal_kind(error)
            # The other kinds say it all; OpenSSL's name of the reason (never the client's text) here.
            detail = getattr(error, "reason", None) if kind == tls.HANDSHAKE_FAILED else None
            self._log_tls_refusal(kind, addr, detail)
            return None
        except OSError:  # reset or closed during the handshake
            util.close(sock)
            return None
        finally:
            if timer is not None:
                timer.close()
        cert = None
        if sock.context.verify_mode != ssl.CERT_NONE:
            cert = sock.getpeercert(binary_form=True)  # verified: the handshake failed otherwise
        self.tls_connections[gevent.getcurrent()] = cert
        return sock

    def _refuse_plain_http(self, client, addr) -> None:
        from registry.serving import tls

        self._log_tls_refusal(tls.PLAIN_HTTP, addr)
        try:
            client.sendall(tls.plain_http_answer())
        except OSError:
            util.close(client)
        else:
            # The request it sent is still unread: a close now would reset the connection before the
            # client reads the answer.
            util.close_graceful(client, timeout=DRAIN_SECONDS, max_drain=DRAIN_BYTES)

    def _log_tls_refusal(self, kind: str, addr, detail: str | None = None) -> None:
        from registry.domain.refusals import refusal_fields

        # One line a minute at most per kind, with the count since the last.
        count = self.refusal_lines.note(f"tls: {kind}")
        if count:
            from registry.serving.tls import HINTS

            self.log.warning(
                "refused %d TLS connection(s) since the last line (latest from %s: %s%s; %s)",
                count,
                addr[0] if isinstance(addr, tuple) else addr,
                kind,
                f" ({detail})" if detail else "",
                HINTS.get(kind, ""),
                extra=refusal_fields(f"tls: {kind}", count),
            )

    def refuse(self, client, addr, reason: str) -> None:
        """Answer a refused connection and close it, without reading from it. Called from the accept
        loop (the hub): the answer goes in one non-blocking send, or not at all."""
        from registry.domain.refusals import refusal_fields
        from registry.serving.connections import refusal_answer

        try:
            getattr(client, "_sock", client).send(refusal_answer(reason))
        except OSError:
            pass
        finally:
            util.close(client)
        # One line a minute at most: a flood of refusals must not become a flood of log lines.
        count = self.refusal_lines.note("connection")
        if count:
            self.log.warning(
                "refused %d connection(s) since the last line (latest from %s: %s cap; "
                "EUREKA_MAX_CONNECTIONS_PER_ADDRESS / EUREKA_MAX_CONNECTIONS)",
                count,
                addr[0] if isinstance(addr, tuple) else addr,
                reason.replace("_", " "),
                extra=refusal_fields("connection", count),
            )

    def _try_h2c_upgrade(self, listener, req, parser, client, addr):
        # gunicorn asks its settings whether an HTTP/1.1 request may upgrade to HTTP/2 (off by default).
        return self.h2c_upgrades and super()._try_h2c_upgrade(listener, req, parser, client, addr)

    def timeout_ctx(self):
        return self._next_request_wait

    def wait_limits(self) -> tuple[float, float]:
        """How long a new connection may take to send its first request, and a kept-alive one its
        next: the header timeout and the keep-alive time; under pressure (most of the connection cap
        used), the header timeout for both, so that idle connections make room."""
        keepalive = self.keepalive_s
        header = min(self.header_timeout_s, keepalive) if self.header_timeout_s else keepalive
        admission = self.admission
        if admission is not None and admission.under_pressure:
            return header, header
        return header, keepalive

    def sweep_waits(self) -> None:
        """Ends the waits past their time (``wait_limits``) and closes the slow readers' writes that
        are due (``SlowReaders.due``), looking every quarter of the shorter wait or of the write
        timeout, or every second, whichever is sooner."""
        while self.alive:
            period = min(1.0, self.wait_limits()[0] / 4)
            slow_readers = self.slow_readers
            if slow_readers is not None and slow_readers.timeout_s:
                period = min(period, slow_readers.timeout_s / 4)
            gevent.sleep(period)
            first_s, next_s = self.wait_limits()
            now = time.monotonic()
            for greenlet, wait in list(self.waiting.items()):
                began, first = wait
                if now - began >= (first_s if first else next_s):
                    self._end_wait(greenlet, wait)
            if slow_readers is not None:
                for number, write in enumerate(slow_readers.due(self.admission)):
                    if number and not number % CLOSE_BATCH:
                        gevent.sleep(FAIR_TURN_S)  # the loop polls: requests come in between
                    self._close_slow_reader(write)

    def shed_slowest_reader(self) -> bool:
        """At the connection cap: close the connection blocked longest in a write, so that a new one
        is admitted in its place (``ConnectionAdmission(make_room=...)``); False if none is."""
        write = self.slow_readers.shed() if self.slow_readers is not None else None
        if write is None:
            return False
        self._close_slow_reader(write)
        return True

    def _close_slow_reader(self, write) -> None:
        from registry.serving.connections import reset_on_close

        # From the hub, and only if that greenlet is still in that same write.
        def close() -> None:
            if self.slow_readers.current(write.owner) is write:
                reset_on_close(write.sock)
                write.owner.throw(ReaderTooSlow(errno.ECONNRESET, f"reader too slow ({write.closing})"))

        gevent.get_hub().loop.run_callback(close)
        self._log_slow_reader(write.closing)

    def _log_slow_reader(self, reason: str) -> None:
        from registry.domain.refusals import refusal_fields

        # One line a minute at most per reason, with the count since the last.
        kind = f"slow reader: {reason.replace('_', ' ')}"
        count = self.refusal_lines.note(kind)
        if count:
            self.log.warning(
                "closed %d connection(s) whose readers did not read their answers since the last line "
                "(%s; EUREKA_WRITE_TIMEOUT_SECONDS / EUREKA_SLOW_READERS_MAX_BYTES / EUREKA_MAX_CONNECTIONS)",
                count,
                reason.replace("_", " "),
                extra=refusal_fields(kind, count),
            )

    def _end_wait(self, greenlet, since: tuple) -> None:
        # From the hub, and only if that greenlet is still in that same wait: had its request come
        # meanwhile, the exception would break the request instead.
        def end() -> None:
            if self.waiting.get(greenlet) is since:
                greenlet.throw(NextRequestNotComing())

        gevent.get_hub().loop.run_callback(end)

    def handle_exit(self, sig, frame):
        super().handle_exit(sig, frame)
        # Out of the signal handler, as gunicorn does for SIGQUIT.
        gevent.spawn(self._end_waits)

    def _end_waits(self) -> None:
        for greenlet, since in list(self.waiting.items()):
            self._end_wait(greenlet, since)
        # Nor for clients that are not reading their answers (the sweeper stops with the worker).
        if self.slow_readers is not None:
            for write in self.slow_readers.stalled():
                self._close_slow_reader(write)

    def handle_error(self, req, client, addr, exc):
        if isinstance(exc, ParseException) and not isinstance(exc, NOT_THE_CLIENTS):
            # gunicorn answers it 4xx and logs a line for it, which the log's refusals filter cuts to
            # one an interval (registry/runtime/logs.py); /metrics counts every one.
            from registry.wire.handlers import BAD_REQUESTS

            BAD_REQUESTS["malformed"] += 1
        super().handle_error(req, client, addr, exc)
        util.close_graceful(client, timeout=DRAIN_SECONDS, max_drain=DRAIN_BYTES)

    def handle_request(self, listener_name, req, sock, addr):
        try:
            keep_alive = super().handle_request(listener_name, req, sock, addr)
        except StopIteration:
            # The response ended the connection (Connection: close, HTTP/1.0, worker shutting down).
            util.close_graceful(sock, timeout=DRAIN_SECONDS, max_drain=DRAIN_BYTES)
            raise
        if not discard_unread_body(getattr(req, "body", None)):
            util.close_graceful(sock, timeout=DRAIN_SECONDS, max_drain=DRAIN_BYTES)
            raise StopIteration()
        return keep_alive
