"""Serve a registry node on granian: HTTP in Rust threads, the node's Python on a few threads.

Why: under gunicorn's gevent worker the HTTP layer (parsing, the event loop, greenlet switches) costs
a heartbeat more CPU than the registry does, and all of it holds the GIL, so the node uses one core.
granian parses and writes HTTP in Rust, off the GIL, on the second core (docs/production.md compares
the two servers).

How requests reach the node here (granian's own WSGI glue is replaced, see ``serve_registry``):

- **The application runs on ``THREADS`` threads at once** (``Gate``): few, because every thread more
  hands the GIL between threads once a request. Turns go round the client addresses, and one address
  has at most ``TURNS_PER_ADDRESS`` requests under way (more: 503 at once), so a client that sends
  many requests at once delays its own, not everyone's. Replication batches, whose views run long,
  take at most ``THREADS - 1`` of the threads, so a heartbeat never waits for a batch to end.
- **Bodies.** granian reads a request's body on the thread that runs the request, so a client that
  sends its body slowly holds that thread until its deadline. The pool has ``BODY_THREADS`` more for
  that, a share of them per client address, and a request gives up its turn of the application while
  it waits for its body.
- **Large and streaming answers** (over ``STREAM_ABOVE_BYTES``, and the change feed's Server-Sent
  Events) are written from threads of their own, a piece at a time: granian writes an answer from
  the thread that hands it over and waits while the client does not read, and a stream waits for
  changes for minutes (the feed caps how many are open, ``EUREKA_CHANGE_STREAMS_MAX``). Every other
  answer is handed to granian in one piece.

What one client may hold, and for how long, is ``registry/serving/granian_limits.py``; the listening
socket's ``TCP_USER_TIMEOUT`` (``listening_socket``) is the send timeout. docs/security.md ("On
granian") lists these limits and what the gunicorn worker does that this server does not (connection
caps per address, a 503 past EUREKA_MAX_CONNECTIONS, gunicorn's answers to malformed HTTP,
``X-Forwarded-Proto``, a separate keep-alive time, a watch of the event loop).

The node starts and stops as under gunicorn (``registry.serving.lifecycle.start_serving``, which both
servers call); on SIGTERM the open streams end at once, granian finishes the requests under way, and
the node stops (jobs, replication, last snapshot). Connections are refused until the node can answer
them: granian's worker opens its own listening socket (``SO_REUSEPORT``) once the node has started,
which is why ``refuse_a_taken_port`` first checks that no other process listens there.

It depends on granian internals of the 2.8 series (its worker class and callback scheduler), hence
the narrow pin in pyproject.toml.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from registry.serving.granian_limits import (
    ANSWER_REFUSED,
    BODY_REFUSED,
    STREAM_ABOVE_BYTES,
    TURN_REFUSED,
    Deadlines,
    Gate,
    Pieces,
    Shares,
    Tally,
    TimedBody,
    TlsRefusals,
    WriterThreads,
)
from registry.wire.request_bodies import BODY_RECEIVED, NO_DEADLINES, BodyDeadlines

logger = logging.getLogger(__name__)

DEFAULT_BIND = "0.0.0.0:8761"
GRACEFUL_TIMEOUT_S = 20
# Threads running the application: more than one lets an answer be built while another is handed
# over; each one more costs heartbeats (the GIL handed between threads).
THREADS = 2
# Requests of one client address under way at once (waiting for a turn of the application or in one,
# receiving a body); more are answered 503 at once.
TURNS_PER_ADDRESS = 8
# Threads kept for receiving request bodies (a body sent slowly holds one until its deadline), and the
# share of them one client address may hold.
BODY_THREADS = 64
BODY_SHARES = 8
# Large answers being written at once (a client that reads slowly holds one until it has read its
# answer or EUREKA_WRITE_TIMEOUT_SECONDS ends it), in all and to one client address.
ANSWER_WRITERS = 64
ANSWER_WRITERS_PER_ADDRESS = 8
# hyper's buffer per connection, for a request's head and what is written to the client: what a slow
# reader's connection holds beside the pieces of its answer. nginx reads heads of up to 32 KB.
CONNECTION_BUFFER_BYTES = 32 * 1024


class _StartResponse:
    """WSGI ``start_response``: keeps the status code and headers for granian."""

    __slots__ = ("status", "headers")

    def __init__(self):
        self.status = 500
        self.headers: list = []

    def __call__(self, status: str, headers: list, exc_info: Any = None):
        self.status = int(status[:3])
        self.headers = headers


class _Chunks:
    """The iterator granian pulls a streaming answer's chunks from, with the answer's ``close``."""

    __slots__ = ("answer", "__next__")

    def __init__(self, answer):
        self.answer = answer
        self.__next__ = iter(answer).__next__

    def close(self):
        close = getattr(self.answer, "close", None)
        if close is not None:
            close()


def _has_body(environ: dict) -> bool:
    length = environ.get("CONTENT_LENGTH")
    if length and length != "0":
        return True
    return "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()


def _declared_length(environ: dict) -> int | None:
    """The body's ``Content-Length``; None when a transfer coding frames it (chunked)."""
    if environ.get("HTTP_TRANSFER_ENCODING"):
        return None
    try:
        return int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:  # hyper refuses a malformed length before any application runs
        return None


def _client_address(environ: dict) -> str:
    return environ.get("REMOTE_ADDR", "")


def _close(answer) -> None:
    close = getattr(answer, "close", None)
    if close is not None:
        close()


_TURNS_BUSY = b"too many requests from this address under way; try again\n"
_BODIES_BUSY = b"too many request bodies being received from this address or in all; try again\n"
_WRITERS_BUSY = b"too many large answers being written to this address or in all; try again\n"


def _busy(proto, message: bytes, retry_after: str) -> tuple[int, int]:
    proto.response_bytes(
        503,
        [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(message))),
            ("Retry-After", retry_after),
            ("Connection", "close"),
        ],
        message,
    )
    return 503, len(message)


def _stream(proto, status, headers, answer) -> None:
    proto.response_iter(status, headers, _Chunks(answer))


def _write(proto, status, headers, content: bytes, writers: Shares, ticket: str) -> None:
    try:
        proto.response_iter(status, headers, Pieces(content))
    finally:
        writers.done(ticket)


class _Atoms(dict):
    def __missing__(self, key):
        return "-"


class AccessLog:
    """One line per answered request, with gunicorn's access-log atoms (``--access-logformat``): h
    (client address), m, U (path), q (query), H (protocol), s (status), B/b (bytes; streams: "-"),
    D (microseconds), L (seconds), t, r (request line), a (User-Agent), f (Referer); others "-"."""

    DEFAULT_FORMAT = '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"'

    def __init__(self, path: str, format: str = DEFAULT_FORMAT):
        self.format = format
        self.lock = threading.Lock()
        self.stream = sys.stdout if path == "-" else open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def write(self, environ: dict, status: int, size: int | None, seconds: float) -> None:
        method = environ.get("REQUEST_METHOD", "-")
        path = environ.get("PATH_INFO", "")
        query = environ.get("QUERY_STRING", "")
        protocol = environ.get("SERVER_PROTOCOL", "-")
        target = f"{path}?{query}" if query else path
        atoms = _Atoms(
            h=environ.get("REMOTE_ADDR", "-"),
            m=method,
            U=path,
            q=query,
            H=protocol,
            s=status,
            B="-" if size is None else size,
            b=size or "-",
            D=int(seconds * 1_000_000),
            L=f"{seconds:.6f}",
            t=time.strftime("[%d/%b/%Y:%H:%M:%S %z]"),
            r=f"{method} {target} {protocol}",
            a=environ.get("HTTP_USER_AGENT", "-"),
            f=environ.get("HTTP_REFERER", "-"),
        )
        line = self.format % atoms + "\n"
        with self.lock:
            self.stream.write(line)


# Requests whose view runs long: a replication batch registers, renews or cancels up to a thousand
# instances in one request.
HEAVY_PATH_ENDS = ("/peerreplication/batch", "/peerreplication/batch/")


def _is_heavy(environ) -> bool:
    return environ.get("PATH_INFO", "").endswith(HEAVY_PATH_ENDS)


def make_runner(
    application,
    threads: int,
    access_log: AccessLog | None = None,
    *,
    turns: Shares | None = None,
    bodies: Shares | None = None,
    writers: Shares | None = None,
    deadlines: Deadlines | None = None,
    body_limits: BodyDeadlines = NO_DEADLINES,
):
    """granian's per-request callback ``(proto, scope)`` for a WSGI ``application``, run on granian's
    request threads (``threads`` of them at once run the application: ``Gate``); each answer logged
    to ``access_log`` when given.

    A request with a body takes a slot of ``bodies`` first (503 unread without one) and its body is
    read within ``body_limits``, watched by ``deadlines`` (registry/serving/granian_limits.py); an
    answer given without reading the body waits until the rest of it is read (``TimedBody.drain``).
    Answers are handed over in one piece, large ones in pieces from a thread of their own (a slot of
    ``writers``, 503 without one), streaming ones from a thread of their own."""
    base_environ = {
        "GATEWAY_INTERFACE": "CGI/1.1",
        "SCRIPT_NAME": "",
        "SERVER_SOFTWARE": "granian",
        "wsgi.errors": sys.stderr,
        "wsgi.multiprocess": False,
        "wsgi.multithread": True,
        "wsgi.run_once": False,
        "wsgi.version": (1, 0),
    }
    gate = Gate(threads)
    # Long requests (replication batches) run on at most threads - 1 of the threads, so one is always
    # left for short ones: a heartbeat then shares the GIL with a batch instead of waiting for it.
    heavy = Gate(max(1, threads - 1))
    turns = turns or Shares(1 << 30, TURNS_PER_ADDRESS)
    bodies = bodies or Shares(BODY_THREADS, max(1, BODY_THREADS // BODY_SHARES))
    writers = writers or Shares(ANSWER_WRITERS, ANSWER_WRITERS_PER_ADDRESS)
    deadlines = deadlines or Deadlines()
    tally = deadlines.tally
    writer_threads = WriterThreads()

    def call(environ) -> tuple[int, list, bytes | None, Any]:
        """The application's answer, not yet handed over: status, headers, and the content joined, or
        (a stream) the answer to write from a thread of its own."""
        start = _StartResponse()
        answer = application(environ, start)
        if isinstance(answer, list):
            return start.status, start.headers, b"".join(answer), None
        if getattr(answer, "streaming", False):
            return start.status, start.headers, None, answer
        try:
            content = b"".join(answer)
        finally:
            _close(answer)
        return start.status, start.headers, content, None

    def send(proto, address, status, headers, content, stream) -> tuple[int, int | None]:
        """Hand the answer over; the status and the body's size (None for a stream)."""
        if stream is not None:
            threading.Thread(
                target=_stream, args=(proto, status, headers, stream), name="stream", daemon=True
            ).start()
            return status, None
        if len(content) > STREAM_ABOVE_BYTES:
            ticket = writers.admit(address)
            if ticket is None:
                tally.note(ANSWER_REFUSED, address)
                return _busy(proto, _WRITERS_BUSY, "5")
            writer_threads.submit(_write, proto, status, headers, content, writers, ticket)
            return status, len(content)
        proto.response_bytes(status, headers, content)
        return status, len(content)

    def respond(proto, environ, address: str) -> tuple[int, int | None]:
        gate.acquire(address)
        try:
            answer = call(environ)
        finally:
            gate.release()
        return send(proto, address, *answer)

    def respond_to_body(proto, environ, address: str) -> tuple[int, int | None]:
        body = TimedBody(
            environ["wsgi.input"], proto, deadlines, body_limits, _declared_length(environ), address
        )
        environ["wsgi.input"] = body
        slot: list[str] = []

        def received() -> None:
            # The application says when the body is in (registry/wire/handlers.py), before its view.
            if slot:
                bodies.done(slot.pop())
            body.settle()

        def received_heavy() -> None:
            received()
            # Its turn of the application is given up while it waits for the heavy lane, so a
            # heartbeat never waits behind a batch that waits behind another.
            gate.release()
            try:
                heavy.acquire(address)
                in_heavy.append(True)
            finally:
                gate.acquire(address)

        in_heavy: list[bool] = []
        environ[BODY_RECEIVED] = received_heavy if _is_heavy(environ) else received
        try:
            gate.acquire(address)
            try:
                ticket = bodies.admit(address)
                if ticket is None:
                    tally.note(BODY_REFUSED, address)
                    return _busy(proto, _BODIES_BUSY, "1")
                slot.append(ticket)
                body.gate = gate
                try:
                    status, headers, content, stream = call(environ)
                finally:
                    if in_heavy:
                        in_heavy.pop()
                        heavy.release()
                    body.settle()
                    body.gate = None
            finally:
                gate.release()
            # An answer given without the body (401 before it is read, 413 past the limit): the rest of
            # it is read first, so that the client gets the answer rather than a reset; a client writes
            # its whole body before it reads (Jersey, Spring). More than that: the connection is closed.
            if not body.drain(status, headers, content or b"") and not body.late:
                headers = [*headers, ("Connection", "close")]
            if not body.claim():
                # Answered past a deadline already, and the connection closed after it.
                if stream is not None:
                    _close(stream)
                return status, None
            return send(proto, address, status, headers, content, stream)
        finally:
            if slot:
                bodies.done(slot.pop())

    def serve(proto, environ) -> tuple[int, int | None]:
        address = _client_address(environ)
        turn = turns.admit(address)
        if turn is None:
            # Refused before it waits for a turn: a client sending many requests at once leaves the
            # requests behind its own in granian's queue waiting for no more than its share.
            tally.note(TURN_REFUSED, address)
            return _busy(proto, _TURNS_BUSY, "1")
        try:
            if _has_body(environ):
                return respond_to_body(proto, environ, address)
            return respond(proto, environ, address)
        finally:
            turns.done(turn)

    def run(proto, scope):
        environ = base_environ | scope
        if access_log is None:
            serve(proto, environ)
            return
        began = time.perf_counter()
        status, size = 500, 0
        try:
            status, size = serve(proto, environ)
        finally:
            access_log.write(environ, status, size, time.perf_counter() - began)

    run.turns = turns
    run.bodies = bodies
    run.writers = writers
    run.deadlines = deadlines
    return run


def end_streams() -> None:
    """At SIGTERM: the change feed's streams end at once instead of holding the stop."""
    # Here, not at the top: granian's master process runs this module too, and loads no node.
    from registry.runtime.process import get_node, holds_node

    if not holds_node():
        return
    streams = get_node().change_streams
    if streams is not None:
        streams.close()


def _worker_target():
    from granian.server.mp import WorkerProcess

    @WorkerProcess.wrap_target
    def serve_registry(
        worker_id,
        callback,
        sock,
        ipc,
        loop,
        runtime_mode,
        runtime_threads,
        runtime_blocking_threads,
        blocking_threads,
        blocking_threads_idle_timeout,
        backpressure,
        task_impl,
        http_mode,
        http1_settings,
        http2_settings,
        websockets,
        static_path,
        log_access_fmt,
        ssl_ctx,
        scope_opts,
        metrics,
    ):
        import signal

        from granian._futures import _new_cbscheduler
        from granian._granian import WorkerSignal, WSGIWorker
        from granian.server.common import WORKERS_METHODS, TaskImpl

        from registry.serving.lifecycle import start_serving, stop_serving

        options = _worker_options()
        start_serving(options["listening"])
        access_log = None
        if options["access_log"]:
            access_log = AccessLog(
                options["access_log"], options["access_log_format"] or AccessLog.DEFAULT_FORMAT
            )
        from granian._granian import ListenerSpec

        from registry.access.clients import is_trusted_proxy
        from registry.domain.refusals import RefusalLines

        body_threads = options["body_threads"]
        tally = Tally(RefusalLines(options["refusal_log_interval_s"]))
        if ssl_ctx[0]:
            # Refused handshakes are refusals like the others: a line a minute per kind, with a count.
            TlsRefusals.install(tally)
        if ssl_ctx[7]:
            logger.info(
                "client certificates are required and verified against %s; granian does not pass them "
                "to the application, so callers are told apart by their Basic credentials only "
                "(docs/tls.md)",
                ssl_ctx[5],
            )
        runner = make_runner(
            callback,
            options["threads"],
            access_log=access_log,
            bodies=Shares(body_threads, max(1, body_threads // BODY_SHARES), exempt=is_trusted_proxy),
            turns=Shares(1 << 30, TURNS_PER_ADDRESS, exempt=is_trusted_proxy),
            deadlines=Deadlines(tally=tally),
            writers=Shares(ANSWER_WRITERS, ANSWER_WRITERS_PER_ADDRESS, exempt=is_trusted_proxy),
            body_limits=options["body_limits"],
        )
        listeners = [(sock, ssl_ctx)]
        if options["plain_port"]:
            # The plain-HTTP port beside the HTTPS one: a second granian worker in this process, on
            # the same application callback (and so the same turns, shares and deadlines).
            host = options["listening"][0][0]
            plain = ListenerSpec(host, options["plain_port"], options["backlog"])
            listeners.append(((plain, None), PLAIN_SSL_CONTEXT))
            logger.info("Listening at: http://%s:%d (plain HTTP beside HTTPS)", host, options["plain_port"])
        signals = []
        drained = []
        for listener, listener_ssl in listeners:
            if listener[0] is not None and not listener[0].is_uds():
                listener = (None, listening_socket(listener[0], options["write_timeout_s"]))
            worker = WSGIWorker(
                worker_id,
                listener,
                ipc,
                runtime_threads,
                runtime_blocking_threads,
                # Request threads: those running the application (the Gate lets that many at once)
                # and those receiving bodies.
                options["threads"] + body_threads,
                blocking_threads_idle_timeout,
                backpressure,
                http_mode,
                http1_settings,
                http2_settings,
                static_path,
                *listener_ssl,
                metrics,
            )
            shutdown = WorkerSignal()
            stopped = threading.Event()
            # granian calls this once it has stopped accepting and finished the requests under way.
            shutdown.add_cb(stopped.set)
            signals.append(shutdown)
            drained.append(stopped)
            serve = getattr(worker, WORKERS_METHODS[runtime_mode][(listener[0] or listener[1]).is_uds()])
            scheduler = _new_cbscheduler(loop, runner, impl_asyncio=task_impl == TaskImpl.asyncio)
            serve(scheduler, loop, shutdown)

        def begin_stop(signum, frame):
            # The streams first: granian waits for every open connection, and a stream is open for
            # minutes.
            end_streams()
            for shutdown in signals:
                shutdown.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, begin_stop)
        try:
            # A timed wait, so that the signal handler runs in this (the main) thread promptly.
            for stopped in drained:
                while not stopped.wait(0.5):
                    pass
        finally:
            stop_serving()

    return serve_registry


# rustls, in granian's worker: TLS 1.2 and 1.3 only, AEAD suites with ECDHE only, no renegotiation.
TLS_PROTOCOL_MIN = "tls1.2"
# What granian's worker takes for a plain-HTTP listener (``ssl_ctx``, as granian builds it).
PLAIN_SSL_CONTEXT = (False, None, None, None, TLS_PROTOCOL_MIN, None, [], False)
_OPTIONAL_ON_GRANIAN = (
    "EUREKA_TLS_CLIENT_AUTH=optional cannot be served by granian: it verifies a client certificate "
    "but cannot hand it to the application, so a certificate would identify no one and a client "
    "without one would pass unnoticed. Use EUREKA_TLS_CLIENT_AUTH=required (every client needs a "
    "certificate from EUREKA_TLS_CLIENT_CA_FILE; accounts are still told apart by Basic credentials), "
    "serve with gunicorn (deploy/gunicorn.conf.py), which maps certificates to accounts, or terminate "
    "TLS in a proxy that passes the certificate in EUREKA_CLIENT_CERT_HEADER (docs/tls.md)"
)


@dataclass(frozen=True)
class Tls:
    """HTTPS on the node's port as granian serves it (``tls_settings``); ``ca_file`` set: every client
    must present a certificate that chains to it."""

    cert_file: str
    key_file: str
    key_password: str | None
    ca_file: str | None
    plain_port: int

    def server_options(self) -> dict[str, Any]:
        """granian's ``ssl_*`` options (``MPServer``); its worker gets them as ``ssl_ctx``."""
        from pathlib import Path

        from granian.constants import SSLProtocols

        return {
            "ssl_cert": Path(self.cert_file),
            "ssl_key": Path(self.key_file),
            "ssl_key_password": self.key_password,
            "ssl_protocol_min": SSLProtocols(TLS_PROTOCOL_MIN),
            "ssl_ca": Path(self.ca_file) if self.ca_file else None,
            "ssl_client_verify": bool(self.ca_file),
        }


def tls_settings(config, port: int) -> Tls | None:
    """HTTPS from the ``EUREKA_TLS_*`` settings (``config``: ``settings.EUREKA.tls``) for a node on
    ``port``: None for plain HTTP. Stops with a message for what granian cannot serve, and for files
    it could not load (granian's worker would fail on them without saying why)."""

    def refuse(problem: str):
        raise SystemExit(f"eureka registry: {problem}")

    if bool(config.cert_file) != bool(config.key_file):
        refuse("HTTPS needs both EUREKA_TLS_CERT_FILE and EUREKA_TLS_KEY_FILE")
    if not config.cert_file:
        if config.client_auth != "none" or config.plain_port:
            refuse(
                "EUREKA_TLS_CLIENT_AUTH and EUREKA_TLS_PLAIN_PORT need HTTPS: "
                "set EUREKA_TLS_CERT_FILE and EUREKA_TLS_KEY_FILE"
            )
        return None
    if config.client_auth == "optional":
        refuse(_OPTIONAL_ON_GRANIAN)
    if config.client_auth == "required" and not config.client_ca_file:
        refuse("EUREKA_TLS_CLIENT_AUTH=required needs EUREKA_TLS_CLIENT_CA_FILE")
    if config.plain_port == port:
        refuse(f"EUREKA_TLS_PLAIN_PORT is the HTTPS port ({port}); give it another")
    _check_tls_files(config)
    return Tls(
        cert_file=config.cert_file,
        key_file=config.key_file,
        key_password=config.key_password or None,
        ca_file=config.client_ca_file if config.client_auth == "required" else None,
        plain_port=config.plain_port,
    )


def _check_tls_files(config) -> None:
    """Load the chain, the key and the CA bundle as granian will, or stop saying which one failed."""
    import ssl

    def refuse(problem: str):
        raise SystemExit(f"eureka registry: {problem}")

    try:
        with open(config.key_file, "rb") as key:
            pem = key.read()
    except OSError as error:
        refuse(f"EUREKA_TLS_KEY_FILE: cannot read {config.key_file}: {error.strerror}")
    encrypted = b"ENCRYPTED" in pem
    # granian decrypts a PKCS#8 key only ("BEGIN ENCRYPTED PRIVATE KEY"), not OpenSSL's older form.
    if encrypted and b"-----BEGIN ENCRYPTED PRIVATE KEY-----" not in pem:
        refuse(
            "EUREKA_TLS_KEY_FILE is encrypted in OpenSSL's legacy form, which granian cannot read: "
            "convert it with `openssl pkcs8 -topk8 -in OLD -out NEW` (and a password)"
        )
    if encrypted and not config.key_password:
        refuse("EUREKA_TLS_KEY_FILE is encrypted: set EUREKA_TLS_KEY_PASSWORD")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        # A password even for a plain key: without one, OpenSSL would ask for it on the terminal.
        context.load_cert_chain(config.cert_file, config.key_file, password=config.key_password or "")
    except OSError as error:
        refuse(
            "cannot load EUREKA_TLS_CERT_FILE and EUREKA_TLS_KEY_FILE "
            f"({config.cert_file}, {config.key_file}): {error.strerror or error}"
        )
    if config.client_auth == "required":
        try:
            context.load_verify_locations(cafile=config.client_ca_file)
        except (OSError, ssl.SSLError) as error:
            refuse(f"cannot load EUREKA_TLS_CLIENT_CA_FILE ({config.client_ca_file}): {error}")


_OPTIONS: dict[str, Any] = {}


def listening_socket(spec, write_timeout_s: float):
    """granian's listening socket (``spec``: its ``ListenerSpec``, bound as granian binds it) with
    ``TCP_USER_TIMEOUT`` and ``TCP_NOTSENT_LOWAT`` set, which every connection accepted from it
    inherits. The first makes the kernel end a connection whose sent bytes stay unacknowledged, or
    unsent behind the client's zero window, that long (EUREKA_WRITE_TIMEOUT_SECONDS; HAProxy's
    ``tcp-ut``): granian has no write timeout of its own, and a client that never reads would
    otherwise hold its connection, and what was written for it, for as long as it likes."""
    import socket

    from registry.serving.connections import limit_unsent

    holder = spec.build()
    # A second descriptor of the same socket, to set the options with; closing it leaves granian's.
    with socket.socket(fileno=os.dup(holder.get_fd())) as sock:
        if write_timeout_s and hasattr(socket, "TCP_USER_TIMEOUT"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, max(1, int(write_timeout_s * 1000)))
        # The kernel takes little more of an answer than is in flight, as under gunicorn: a client that
        # reads nothing holds that, and a few pieces of its answer here, not a socket buffer full.
        limit_unsent(sock)
    return holder


def _worker_options() -> dict[str, Any]:
    return _OPTIONS


def raise_open_files_limit(connections: int) -> None:
    """Let the process hold ``connections`` sockets and some files beside, as far as the hard limit
    allows (granian accepts that many: its backpressure)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + 1024
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        if raised > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))


def parse_bind(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def refuse_a_taken_port(host: str, port: int) -> None:
    """Stop with a message when something listens on ``host:port`` already. granian's worker listens
    with SO_REUSEPORT (so that connections are refused, not queued, until it can answer them), which
    would let a second node on the same port share its connections with the first: two registries
    answering one address at random. A probe bound without SO_REUSEPORT fails where one listens."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise SystemExit(f"eureka registry: cannot listen on {host}:{port}: {error.strerror}") from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m registry.serving.granian_server",
        description="Serve a registry node on granian (see the module's docstring).",
    )
    parser.add_argument("--bind", type=parse_bind, default=parse_bind(DEFAULT_BIND), help="HOST:PORT")
    parser.add_argument("--backlog", type=int, default=2048)
    parser.add_argument(
        "--header-timeout", type=float, help="seconds (default: EUREKA_HEADER_TIMEOUT_SECONDS)"
    )
    parser.add_argument("--graceful-timeout", type=int, default=GRACEFUL_TIMEOUT_S, help="seconds")
    parser.add_argument("--threads", type=int, default=THREADS, help="threads running the application")
    parser.add_argument(
        "--body-threads", type=int, default=BODY_THREADS, help="threads receiving request bodies"
    )
    parser.add_argument("--access-logfile", help="a path, or - for standard output (default: none)")
    parser.add_argument("--access-logformat", help="gunicorn's atoms, see AccessLog")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)

    from granian.constants import HTTPModes, Interfaces, RuntimeModes
    from granian.http import HTTP1Settings
    from granian.log import LogLevels
    from granian.server.mp import MPServer

    host, port = args.bind
    refuse_a_taken_port(host, port)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "eureka_site.settings")
    from django.conf import settings

    # granian's own lines (start, stop, worker errors) in the registry's format, secrets masked.
    log_config = {
        **settings.LOGGING,
        "loggers": {
            **settings.LOGGING.get("loggers", {}),
            "_granian": {"handlers": ["console"], "propagate": False},
        },
    }
    limits = settings.EUREKA.connections
    header_timeout_s = limits.header_timeout_s if args.header_timeout is None else args.header_timeout
    tls = tls_settings(settings.EUREKA.tls, port)
    plain_port = tls.plain_port if tls is not None else 0
    if plain_port:
        refuse_a_taken_port(host, plain_port)
    _OPTIONS.update(
        listening=[(host, port)] + ([(host, plain_port)] if plain_port else []),
        plain_port=plain_port,
        backlog=args.backlog,
        threads=max(1, args.threads),
        body_threads=max(1, args.body_threads),
        body_limits=BodyDeadlines(limits.body_idle_timeout_s, limits.body_timeout_s),
        write_timeout_s=limits.write_timeout_s,
        refusal_log_interval_s=settings.EUREKA.process.refusal_log_interval_seconds,
        access_log=args.access_logfile,
        access_log_format=args.access_logformat,
    )
    raise_open_files_limit(limits.max_total)
    server = MPServer(
        "eureka_site.wsgi:application",
        address=host,
        port=port,
        interface=Interfaces.WSGI,
        workers=1,
        # The worker starts its own threads (serve_registry): the application's and the bodies'.
        blocking_threads=args.threads,
        # Connections held at once (more wait in the kernel's backlog): EUREKA_MAX_CONNECTIONS.
        backpressure=limits.max_total or None,
        runtime_threads=1,
        runtime_mode=RuntimeModes.mt,
        http=HTTPModes.http1,
        websockets=False,
        backlog=args.backlog,
        http1_settings=HTTP1Settings(
            # 0 is off, as for gunicorn; hyper takes a day for that.
            header_read_timeout=int((header_timeout_s or 86_400) * 1000),
            keep_alive=True,
            max_buffer_size=CONNECTION_BUFFER_BYTES,
        ),
        log_level=LogLevels(args.log_level),
        log_dictconfig=log_config,
        workers_kill_timeout=args.graceful_timeout,
        working_dir=None,
        **(tls.server_options() if tls is not None else {}),
    )
    server.serve(spawn_target=_worker_target())


if __name__ == "__main__":
    main()
