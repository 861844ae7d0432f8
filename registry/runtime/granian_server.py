"""Serve a registry node on granian: HTTP in Rust threads, the node's Python on one thread.

Why: under gunicorn's gevent worker a heartbeat spends more of its CPU in the HTTP layer (parsing,
the event loop, greenlet switches) than in the registry, and all of it holds the GIL, so the node
uses one core. granian parses and writes HTTP in Rust, off the GIL, on the second core: measured on a
2-core machine beside a warm Spring Cloud Eureka Server, the node serves 1.18 times its heartbeats
where gunicorn served 0.6 times, at about half the CPU a heartbeat (bench/README.md, "Side by side").

How requests reach the node here (granian's own WSGI glue is replaced, see ``serve_registry``):

- **Every request runs on one of ``--threads`` Python threads** (2). One thread serves the most
  heartbeats (no GIL handed between threads: measured with 16 connections, 1 thread ~10,000-11,700/s,
  2 ~10,300-11,300, 4 ~8,800-9,800, 16 ~6,700), but granian reads a request's body on the thread that
  runs the request and lets go of it only once the body is in (it takes the body back when the
  callback returns, so the read cannot be handed to another thread): a client that sends its body
  slowly holds that thread. ``BodyReads`` caps the bodies received at once below the thread count,
  so heartbeats and reads (no body) always find a thread.
- **Streaming answers** (the change feed's Server-Sent Events) are written from a thread of their
  own: granian writes an answer's chunks from the thread that produced it, and a stream waits for
  changes for minutes. The feed caps how many are open (``EUREKA_FEED_MAX_STREAMS``).
- Every other answer is joined and handed to granian in one piece.

The node starts as under gunicorn (``registry.runtime.node.start_serving``, which both servers
call): warm-restart snapshot, cluster (knowing where it listens), the garbage-collector policy,
memory tuning; and on
SIGTERM the open streams end at once, granian finishes the requests under way, and the node stops
(jobs, replication, last snapshot).

What gunicorn's worker (``registry/runtime/gunicorn_worker.py``) does that this server does not:
connections are not admitted per client address (``EUREKA_MAX_CONNECTIONS_PER_ADDRESS``): an idle
connection costs granian a Rust task, not a Python thread; a body has no deadline (no 408: granian
gives no read timeout and no way to the connection; ``BodyReads`` bounds what slow bodies hold
instead); malformed HTTP is answered by granian's parser (hyper), not with gunicorn's answers;
``X-Forwarded-Proto`` is not read (``FORWARDED_ALLOW_IPS``); there is no event loop to watch for
stalls. Connections are refused until the node can answer them as under gunicorn, by other means:
granian's worker opens its own listening socket (``SO_REUSEPORT``) once the node has started, which
is also why ``refuse_a_taken_port`` checks that no other process listens there first.

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
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_BIND = "0.0.0.0:8761"
# A new connection sends its request line and headers within this (Tomcat's connectionTimeout).
HEADER_TIMEOUT_S = 20
GRACEFUL_TIMEOUT_S = 20
# Request threads: more than one lets a body be received while other requests are answered; each one
# more costs heartbeats (GIL hand-overs: 1 thread ~11,000/s, 2 ~10,800, 4 ~9,800, 16 ~6,700).
THREADS = 2
# What is read of a body the application answered without reading (more: the connection is closed).
DRAIN_BYTES = 64 * 1024
# A body awaited this long is a slow one; a body past the cap waits for a slot until a held one is slow
# (BodyReads). A shorter wait refused registrations in a burst of 10,000 (a read that waited for the
# GIL behind a payload build: 2 of 10,000 refused with 50 ms).
SLOW_BODY_S = 0.5
BODY_SLOT_WAIT_S = SLOW_BODY_S


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


def _client_address(environ: dict) -> str:
    return environ.get("REMOTE_ADDR", "")


_BUSY = b"too many slow request bodies being received; try again\n"


class BodyReads:
    """The requests whose body is being received, capped so that they never hold every thread.

    granian reads the socket: a client that sends its body slowly, or never, holds a request thread
    until it has sent it or gone, and nothing here can end that wait (granian gives the application
    neither a read timeout nor the connection). So at most ``max_total`` bodies (the request threads
    less one) are received at once: heartbeats and reads have no body and always find a thread, and
    the node stays on the network however many slow bodies arrive. A request with a body past the cap
    waits up to ``wait_s`` for a slot (bodies that are in the socket already, as every real client
    sends them, are read in microseconds), and is answered 503 at once, unread, when a body held has
    been awaited longer than ``slow_s`` or the wait ends; so is one from an address that holds
    ``max_per_address`` slow bodies already. Eureka clients retry a 503, at another node if they
    have one. The wait has a price: meanwhile that thread serves nothing else, so a client that keeps
    opening fresh slow bodies can delay heartbeats by up to ``wait_s`` at a time (not stop them)."""

    def __init__(
        self,
        max_total: int,
        max_per_address: int,
        slow_s: float = SLOW_BODY_S,
        wait_s: float = BODY_SLOT_WAIT_S,
        clock=time.monotonic,
    ):
        self.max_total = max_total
        self.max_per_address = max_per_address
        self.slow_s = slow_s
        self.wait_s = wait_s
        self.clock = clock
        self.changed = threading.Condition()
        self.next_key = 0
        # key -> (began, client address)
        self.receiving: dict[int, tuple[float, str]] = {}
        self.refused = 0

    def admit(self, address: str) -> int | None:
        """A key for ``done``, or None: answer 503."""
        with self.changed:
            give_up = self.clock() + self.wait_s
            while True:
                now = self.clock()
                slow = [held for began, held in self.receiving.values() if began <= now - self.slow_s]
                if self.max_per_address and slow.count(address) >= self.max_per_address:
                    break
                if len(self.receiving) < self.max_total:
                    self.next_key += 1
                    self.receiving[self.next_key] = (now, address)
                    return self.next_key
                if slow or now >= give_up or not self.changed.wait(give_up - now):
                    break
            self.refused += 1
            return None

    def done(self, key: int) -> None:
        with self.changed:
            if self.receiving.pop(key, None) is not None:
                self.changed.notify()


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


def make_runner(
    application, threads: int, max_bodies_per_address: int = 1, access_log: AccessLog | None = None
):
    """granian's per-request callback ``(proto, scope)`` for a WSGI ``application``: answers handed
    over in one piece, streaming ones from a thread of their own, bodies received under
    ``BodyReads``; each logged to ``access_log`` when given."""
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
    from registry.wire.request_bodies import BODY_RECEIVED

    bodies = BodyReads(max(1, threads - 1), max_bodies_per_address)

    def stream(proto, status, headers, answer):
        proto.response_iter(status, headers, _Chunks(answer))

    def respond(proto, environ) -> tuple[int, int | None]:
        """Answer; the status and the body's size (None for a stream)."""
        start = _StartResponse()
        answer = application(environ, start)
        if isinstance(answer, list):
            content = b"".join(answer)
        elif getattr(answer, "streaming", False):
            threading.Thread(
                target=stream, args=(proto, start.status, start.headers, answer), name="stream", daemon=True
            ).start()
            return start.status, None
        else:
            try:
                content = b"".join(answer)
            finally:
                close = getattr(answer, "close", None)
                if close is not None:
                    close()
        proto.response_bytes(start.status, start.headers, content)
        return start.status, len(content)

    def answer_busy(proto) -> tuple[int, int]:
        proto.response_bytes(
            503,
            [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(_BUSY))),
                ("Retry-After", "1"),
                ("Connection", "close"),
            ],
            _BUSY,
        )
        return 503, len(_BUSY)

    def respond_to_body(proto, environ) -> tuple[int, int | None]:
        key = bodies.admit(_client_address(environ))
        if key is None:
            return answer_busy(proto)
        # The application says when the body is in (registry/wire/handlers.py), before its view runs.
        environ[BODY_RECEIVED] = lambda: bodies.done(key)
        body = environ["wsgi.input"]
        try:
            answered = respond(proto, environ)
            # An answer given without the body (401 before it is read, 413 past the limit): read what
            # the client is still sending, up to DRAIN_BYTES, so that it gets the answer rather than
            # a reset; a client writes its whole body before it reads (Jersey, Spring). Nothing is
            # left to read when the application read the body.
            body.read(DRAIN_BYTES)
            return answered
        finally:
            bodies.done(key)

    def run(proto, scope):
        environ = base_environ | scope
        if access_log is None:
            if _has_body(environ):
                respond_to_body(proto, environ)
            else:
                respond(proto, environ)
            return
        began = time.perf_counter()
        status, size = 500, 0
        try:
            status, size = respond_to_body(proto, environ) if _has_body(environ) else respond(proto, environ)
        finally:
            access_log.write(environ, status, size, time.perf_counter() - began)

    run.bodies = bodies
    return run


def end_streams() -> None:
    """At SIGTERM: the change feed's streams end at once instead of holding the stop."""
    from registry.runtime.node import holds_node

    if not holds_node():
        return
    from registry.runtime.node import get_node

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

        from registry.runtime.node import start_serving, stop_serving

        options = _worker_options()
        start_serving(options["listening"])
        access_log = None
        if options["access_log"]:
            access_log = AccessLog(
                options["access_log"], options["access_log_format"] or AccessLog.DEFAULT_FORMAT
            )
        runner = make_runner(callback, options["threads"], access_log=access_log)
        shutdown = WorkerSignal()
        drained = threading.Event()
        # granian calls this once it has stopped accepting and finished the requests under way.
        shutdown.add_cb(drained.set)

        def begin_stop(signum, frame):
            # The streams first: granian waits for every open connection, and a stream is open for
            # minutes.
            end_streams()
            shutdown.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, begin_stop)
        worker = WSGIWorker(
            worker_id,
            sock,
            ipc,
            runtime_threads,
            runtime_blocking_threads,
            blocking_threads,
            blocking_threads_idle_timeout,
            backpressure,
            http_mode,
            http1_settings,
            http2_settings,
            static_path,
            *ssl_ctx,
            metrics,
        )
        serve = getattr(worker, WORKERS_METHODS[runtime_mode][(sock[0] or sock[1]).is_uds()])
        scheduler = _new_cbscheduler(loop, runner, impl_asyncio=task_impl == TaskImpl.asyncio)
        serve(scheduler, loop, shutdown)
        try:
            # A timed wait, so that the signal handler runs in this (the main) thread promptly.
            while not drained.wait(0.5):
                pass
        finally:
            stop_serving()

    return serve_registry


_OPTIONS: dict[str, Any] = {}


def _worker_options() -> dict[str, Any]:
    return _OPTIONS


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
        prog="python -m registry.runtime.granian_server",
        description="Serve a registry node on granian (see the module's docstring).",
    )
    parser.add_argument("--bind", type=parse_bind, default=parse_bind(DEFAULT_BIND), help="HOST:PORT")
    parser.add_argument("--backlog", type=int, default=2048)
    parser.add_argument("--header-timeout", type=int, default=HEADER_TIMEOUT_S, help="seconds")
    parser.add_argument("--graceful-timeout", type=int, default=GRACEFUL_TIMEOUT_S, help="seconds")
    parser.add_argument("--threads", type=int, default=THREADS, help="request threads (see THREADS)")
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
    _OPTIONS.update(
        listening=[(host, port)],
        threads=args.threads,
        access_log=args.access_logfile,
        access_log_format=args.access_logformat,
    )
    server = MPServer(
        "eureka_site.wsgi:application",
        address=host,
        port=port,
        interface=Interfaces.WSGI,
        workers=1,
        # One Python thread for the requests without a body (the module docstring says why).
        blocking_threads=args.threads,
        runtime_threads=1,
        runtime_mode=RuntimeModes.mt,
        http=HTTPModes.http1,
        websockets=False,
        backlog=args.backlog,
        http1_settings=HTTP1Settings(header_read_timeout=args.header_timeout * 1000, keep_alive=True),
        log_level=LogLevels(args.log_level),
        log_dictconfig=log_config,
        workers_kill_timeout=args.graceful_timeout,
        working_dir=None,
    )
    server.serve(spawn_target=_worker_target())


if __name__ == "__main__":
    main()
