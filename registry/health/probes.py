"""The probes themselves, and a pool that runs many at once with a bound. No Django.

HTTP: ``GET`` the instance's health-check URL; any 2xx or 3xx answer is healthy (redirects are
never followed, so a 3xx cannot send the probe to another host; the body is not read). Anything else,
a timeout or a connection error is a failure with a short reason. An https:// target's certificate
is verified, host name included, against EUREKA_OUTBOUND_CA_FILE when one is named (the node's
outbound TLS, registry/domain/outbound_tls.py; a certificate that does not verify fails the probe
with the reason, ``TLS: certificate verify failed: ...``); the node's own certificate is never
presented. Without a CA file certificates are not verified: the probe asks "does it answer?", not
"who is it?", and internal services often present certificates no public authority signed.
TCP: a connection to the host and port is opened and closed.

Before connecting, the host is resolved and every address is judged by the ``AddressPolicy``
(``addresses.py``); the probe connects to an address it judged, never resolving again, and when no
address may be probed the result is ``refused``: nothing was sent, and the checker does not count it
as a failure.

``timeout_ms`` bounds the whole probe. The same code runs in the registry process under
gevent (the pool is then a gevent pool and probes are greenlets) and in a Celery worker (threads).
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from registry.domain.outbound_tls import OutboundTls, tls_failure
from registry.health.addresses import Address, AddressPolicy, parse_address
from registry.health.checker import ProbeResult, ProbeTarget
from registry.health.config import HTTP

USER_AGENT = "eureka-django-health-check"


class Refused(Exception):
    """No address of the target may be probed (``AddressPolicy``): nothing is sent."""


def probe(target: ProbeTarget, policy: AddressPolicy, tls: OutboundTls | None = None) -> ProbeResult:
    """Run one probe; never raises (an unexpected error is a failed probe with its type as reason)."""
    started = time.perf_counter()
    refused = False
    try:
        if target.kind == HTTP:
            ok, reason = probe_http(target.url or "", target.timeout_ms / 1000, policy, tls)
        else:
            ok, reason = probe_tcp(target.host, target.port, target.timeout_ms / 1000, policy)
    except Refused as exc:
        ok, reason, refused = False, str(exc), True
    except Exception as exc:  # a probe must never take its pool down with it
        ok, reason = False, f"probe error: {type(exc).__name__}"
    latency_ms = round((time.perf_counter() - started) * 1000, 3)
    return ProbeResult(target.app, target.instance_id, target.claim, ok, latency_ms, reason, refused)


def probe_http(
    url: str, timeout_s: float, policy: AddressPolicy, tls: OutboundTls | None = None
) -> tuple[bool, str]:
    """``GET`` with ``Connection: close``; reads the status line only (a few bytes), not the body.

    Written on the socket rather than with http.client: the status line is all a probe needs, and
    header parsing plus buffered readers cost the node more than the rest of a probe. ``timeout_s`` is
    a deadline for the whole exchange. An https:// target is verified when ``tls`` names a CA file.
    Raises ``Refused``."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = f"[{host}]" if ":" in host else host
    if parts.port:
        host_header += f":{parts.port}"
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host_header}\r\nUser-Agent: {USER_AGENT}\r\n"
        "Accept: */*\r\nConnection: close\r\n\r\n"
    ).encode("latin-1", "replace")
    deadline = time.monotonic() + timeout_s
    try:
        sock = _connect(host, port, deadline, timeout_s, policy)
        try:
            if secure:
                sock.settimeout(_left(deadline))
                if tls is not None and tls.ca_file:
                    # The host name (or IP address) of the URL is what the certificate must name.
                    sock = tls.context(client_cert=False).wrap_socket(sock, server_hostname=host)
                else:
                    sock = _unverified_tls().wrap_socket(sock, server_hostname=None if _is_ip(host) else host)
            sock.settimeout(_left(deadline))
            sock.sendall(request)
            head = b""
            while b"\r\n" not in head and len(head) < MAX_STATUS_LINE:
                sock.settimeout(_left(deadline))
                chunk = sock.recv(MAX_STATUS_LINE)
                if not chunk:
                    break
                head += chunk
        finally:
            sock.close()
    except OSError as exc:
        return False, _socket_reason(exc, timeout_s)
    status = _status_code(head)
    if status is None:
        return False, "bad HTTP answer" if head else "connection closed without an answer"
    return 200 <= status < 400, f"HTTP {status}"


def probe_tcp(host: str, port: int, timeout_s: float, policy: AddressPolicy) -> tuple[bool, str]:
    """Raises ``Refused``."""
    try:
        _connect(host, port, time.monotonic() + timeout_s, timeout_s, policy).close()
    except OSError as exc:
        return False, _socket_reason(exc, timeout_s)
    return True, "connected"


MAX_STATUS_LINE = 1024


def _status_code(head: bytes) -> int | None:
    """``HTTP/1.1 200 OK`` → 200; None for anything that is not an HTTP status line."""
    line = head.split(b"\r\n", 1)[0]
    parts = line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or len(parts[1]) != 3 or not parts[1].isdigit():
        return None
    return int(parts[1])


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _connect(host: str, port: int, deadline: float, timeout_s: float, policy: AddressPolicy) -> socket.socket:
    """A socket connected to one of ``host``'s addresses that ``policy`` allows, tried in the resolver's
    order; raises ``Refused`` when it allows none. The connection goes to the very address judged (the
    name is not looked up again), so a name that resolves elsewhere the second time (DNS rebinding)
    cannot slip past the policy."""
    addresses = _resolve(host, port, deadline, timeout_s)
    allowed = []
    refusal = None
    for address in addresses:
        reason = policy.refusal(address)
        if reason is None:
            allowed.append(address)
        elif refusal is None:
            refusal = reason
    if not addresses:
        raise socket.gaierror(socket.EAI_NONAME, "no address")
    if not allowed:
        raise Refused(refusal)
    error: OSError | None = None
    for address in allowed:
        family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(_left(deadline))
            sock.connect((str(address), port))
            return sock
        except OSError as exc:
            sock.close()
            error = exc
        except BaseException:
            sock.close()
            raise
    raise error  # type: ignore[misc] (allowed is not empty, so a connect failed)


# Under gevent, name lookups run in native threads of a pool of the probes' own, this many. A lookup
# waits for a free thread (up to its probe's deadline) rather than queueing behind the others: names
# whose DNS server never answers then cost probes of names their timeout, and nothing piles up.
LOOKUP_THREADS = 8
LOOKUP_WAIT_S = 0.005


class _LookupSlots:
    """Threads of the lookup pool in use, counted under a native lock: a lookup that outlives its probe
    (the probe gave up at its deadline) keeps its thread, and its slot, until it ends."""

    def __init__(self, size: int):
        from gevent import monkey
        from gevent.threadpool import ThreadPool

        self.size = size
        self.busy = 0
        self._lock = monkey.get_original("_thread", "allocate_lock")()
        self.pool = ThreadPool(size)
        self._getaddrinfo = monkey.get_original("socket", "getaddrinfo")

    def take(self) -> bool:
        with self._lock:
            if self.busy >= self.size:
                return False
            self.busy += 1
            return True

    def lookup(self, host: str, port: int) -> list:
        """Runs in a pool thread; its slot is given back when the lookup ends, whoever waits for it."""
        try:
            return self._getaddrinfo(host, port, type=socket.SOCK_STREAM)
        finally:
            with self._lock:
                self.busy -= 1


_lookup_slots: _LookupSlots | None = None


def _resolve(host: str, port: int, deadline: float, timeout_s: float) -> list[Address]:
    """``host``'s addresses, judged one by one by the caller. An IP address needs no lookup (under
    gevent a lookup is a round trip to a thread, the most expensive part of a probe to a literal IP).

    In a Celery worker each probe has a thread of its own, which the lookup blocks (bounded by the
    resolver's own timeout, not the probe's). Under gevent the lookup never runs on the event loop:
    the node's loop would stop for every probe while DNS answers."""
    literal = parse_address(host)
    if literal is not None:
        return [literal]
    if _gevent_patched():
        infos = _gevent_lookup(host, port, deadline, timeout_s)
    else:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[Address] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        address = parse_address(str(sockaddr[0]))
        if address is not None and address not in addresses:
            addresses.append(address)
    return addresses


def _gevent_lookup(host: str, port: int, deadline: float, timeout_s: float) -> list:
    """In a native thread of the probes' own pool, with the unpatched getaddrinfo: slow lookups take
    neither the event loop nor the hub's pool (gzip offload, password hashing)."""
    from gevent import Timeout, sleep

    global _lookup_slots
    if _lookup_slots is None:
        _lookup_slots = _LookupSlots(LOOKUP_THREADS)
    slots = _lookup_slots
    while not slots.take():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"host name lookup: all {slots.size} lookup threads busy for {timeout_s:g}s")
        sleep(LOOKUP_WAIT_S)
    try:
        return slots.pool.spawn(slots.lookup, host, port).get(timeout=_left(deadline))
    except Timeout:
        raise TimeoutError(f"host name lookup took over {timeout_s:g}s") from None


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("probe deadline passed")
    return left


def _socket_reason(exc: OSError, timeout_s: float) -> str:
    """Short and free of addresses or credentials (the URL is shown beside it anyway)."""
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return str(exc) if "host name" in str(exc) else f"timed out after {timeout_s:g}s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    if isinstance(exc, socket.gaierror):
        return "host name not resolved"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {tls_failure(exc) or type(exc).__name__}"
    return f"{type(exc).__name__}: {exc.strerror or exc}"[:120]


_tls_context: ssl.SSLContext | None = None


def _unverified_tls() -> ssl.SSLContext:
    global _tls_context
    if _tls_context is None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        _tls_context = context
    return _tls_context


def _gevent_patched() -> bool:
    try:
        from gevent import monkey
    except ImportError:  # pragma: no cover (gevent is a dependency)
        return False
    return monkey.is_module_patched("socket")


class ProbePool:
    """Runs probes with at most ``concurrency`` at once; counts how many ran at once at most.

    Greenlets where gevent has patched the sockets (the registry process), threads elsewhere. Every
    probe connects only where ``policy`` allows, https:// ones with ``tls`` (the node's outbound TLS)."""

    def __init__(self, concurrency: int, policy: AddressPolicy, tls: OutboundTls | None = None):
        self.concurrency = concurrency
        self.policy = policy
        self.tls = tls
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        if _gevent_patched():
            from gevent.pool import Pool

            self._spawn: Callable = Pool(concurrency).spawn
            self._executor = None
        else:
            self._executor = ThreadPoolExecutor(concurrency, thread_name_prefix="eureka-health-probe")
            self._spawn = self._executor.submit

    def free(self) -> int:
        with self._lock:
            return self.concurrency - self.active

    def submit(self, target: ProbeTarget, on_result: Callable[[ProbeResult], None]) -> None:
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        self._spawn(self._run, target, on_result)

    def _run(self, target: ProbeTarget, on_result: Callable[[ProbeResult], None]) -> None:
        try:
            on_result(probe(target, self.policy, self.tls))
        finally:
            with self._lock:
                self.active -= 1
                self._idle.notify_all()

    def wait_free(self, timeout_s: float) -> bool:
        """Wait until a slot is free (bounded); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self.active >= self.concurrency:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no probe runs (bounded); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self.active:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


def run_round(targets: list[ProbeTarget], pool: ProbePool, wait_s: float) -> list[ProbeResult]:
    """Probe every target through ``pool`` and return the results that came back within ``wait_s``."""
    results: list[ProbeResult] = []
    lock = threading.Lock()

    def collect(result: ProbeResult) -> None:
        with lock:
            results.append(result)

    for target in targets:
        # Never more than ``concurrency`` at once: wait for a slot before handing out the next one.
        if not pool.wait_free(wait_s):
            break
        pool.submit(target, collect)
    pool.wait_idle(wait_s)
    with lock:
        return list(results)
