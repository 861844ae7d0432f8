"""HTTPS on a node served by granian (registry/serving/granian_server.py), live on loopback, with
certificates made by ``trustme``: the protocol over HTTPS with required client certificates, what
rustls offers (TLS 1.2 and 1.3, AEAD suites with ECDHE), the plain-HTTP port beside it, and hostile
or broken TLS refused cleanly, logged once with a count, while the node goes on answering others.
docs/tls.md ("On granian") says what granian cannot do."""

from __future__ import annotations

import datetime
import json
import resource
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import trustme

from tests.factories import instance_body
from tests.interop.conftest import PROJECT_ROOT, STARTUP_TIMEOUT_S, _stop, require_toolchain, server_env
from tests.ports import free_port

pytestmark = pytest.mark.live

JSON = {"Accept": "application/json", "Content-Type": "application/json"}


class Certificates:
    """A CA, the node's certificate from it (RSA, so that RSA key exchange could be offered), clients'
    certificates (good, expired, from another CA, with an oversized chain), as files in ``folder``."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.ca = trustme.CA()
        server = self.ca.issue_cert("127.0.0.1", "localhost", key_type=trustme.KeyType.RSA)
        self.chain = self.write("chain.pem", b"".join(pem.bytes() for pem in server.cert_chain_pems))
        self.key = self.write("key.pem", server.private_key_pem.bytes())
        self.ca_file = self.write("ca.pem", self.ca.cert_pem.bytes())
        self.client = self.leaf("client.pem", self.ca.issue_cert("orders.example", common_name="orders"))
        past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=30)
        expired = self.ca.issue_cert(
            "orders.example", not_before=past, not_after=past + datetime.timedelta(days=1)
        )
        self.expired = self.leaf("expired.pem", expired)
        self.stranger = self.leaf("stranger.pem", trustme.CA().issue_cert("orders.example"))
        # A good certificate followed by far more than any chain: a Certificate message over 64 KB.
        filler = trustme.CA(key_type=trustme.KeyType.RSA).cert_pem.bytes()
        oversized = self.ca.issue_cert("orders.example").private_key_and_cert_chain_pem.bytes()
        self.oversized = self.write("oversized.pem", oversized + filler * 80)

    def write(self, name: str, content: bytes) -> str:
        path = self.folder / name
        path.write_bytes(content)
        return str(path)

    def leaf(self, name: str, cert) -> str:
        return self.write(name, cert.private_key_and_cert_chain_pem.bytes())

    def context(self, client_cert: str | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca_file)
        if client_cert:
            context.load_cert_chain(client_cert)
        return context


class TlsNode:
    def __init__(self, process: subprocess.Popen, port: int, plain_port: int, log: Path, certs: Certificates):
        self.process = process
        self.port = port
        self.plain_port = plain_port
        self.log = log
        self.certs = certs
        self.base_url = f"https://127.0.0.1:{port}"

    def client(self, client_cert: str | None = None, **options) -> httpx.Client:
        context = self.certs.context(self.certs.client if client_cert is None else client_cert or None)
        return httpx.Client(base_url=self.base_url, verify=context, headers=JSON, timeout=10, **options)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def start(workdir: Path, env: dict[str, str], port: int) -> subprocess.Popen:
    log = workdir / "server.log"
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "registry.serving.granian_server", "--bind", f"127.0.0.1:{port}"],
            cwd=PROJECT_ROOT,
            env=server_env(workdir, env),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


@contextmanager
def tls_node(
    workdir: Path, certs: Certificates, extra_env: dict[str, str] | None = None
) -> Iterator[TlsNode]:
    """A node serving HTTPS with required client certificates, and plain HTTP on a port beside."""
    try:
        node = _start_tls(workdir, certs, extra_env)
    except RuntimeError:
        # A port taken between probing and binding: once more, on others.
        node = _start_tls(workdir, certs, extra_env)
    try:
        yield node
    finally:
        _stop(node.process)


def _start_tls(workdir: Path, certs: Certificates, extra_env: dict[str, str] | None) -> TlsNode:
    port, plain_port = free_port(), free_port()
    env = {
        "EUREKA_TLS_CERT_FILE": certs.chain,
        "EUREKA_TLS_KEY_FILE": certs.key,
        "EUREKA_TLS_CLIENT_AUTH": "required",
        "EUREKA_TLS_CLIENT_CA_FILE": certs.ca_file,
        "EUREKA_TLS_PLAIN_PORT": str(plain_port),
        **(extra_env or {}),
    }
    process = start(workdir, env, port)
    node = TlsNode(process, port, plain_port, workdir / "server.log", certs)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    with node.client() as client:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the node exited:\n{node.log_text()[-3000:]}")
            try:
                answered = client.get("/eureka/apps").status_code
                plain = httpx.get(f"http://127.0.0.1:{plain_port}/eureka/apps", timeout=1).status_code
                if answered == plain == 200:
                    return node
            except httpx.TransportError:
                pass
            if time.monotonic() >= deadline:
                _stop(process)
                raise AssertionError(f"no answer over HTTPS:\n{node.log_text()[-3000:]}")
            time.sleep(0.1)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def node(tmp_path_factory, certs) -> Iterator[TlsNode]:
    with tls_node(tmp_path_factory.mktemp("granian_tls"), certs) as server:
        yield server


def register(client: httpx.Client, app: str, host: str) -> int:
    body = json.dumps(instance_body(app=app, host=host)).encode()
    return client.post(f"/eureka/apps/{app}", content=body).status_code


def refused(node: TlsNode, client_cert: str | None = None) -> bool:
    """Whether a request with this client certificate (``""``: none) is refused during the handshake."""
    try:
        with node.client(client_cert) as client:
            client.get("/eureka/apps")
    except httpx.TransportError:
        return True
    return False


def wait_for_line(node: TlsNode, words: str, timeout_s: float = 5) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = [line for line in node.log_text().splitlines() if words in line]
        if lines:
            return lines[-1]
        time.sleep(0.1)
    raise AssertionError(f"no line with {words!r} in the node's log:\n{node.log_text()[-3000:]}")


def test_it_registers_renews_fetches_and_cancels_over_https_with_a_client_certificate(node):
    with node.client() as client:
        assert register(client, "SECURE", "10.8.0.1") == 204
        renewed = client.put("/eureka/apps/SECURE/10.8.0.1:secure:8080")
        assert renewed.status_code == 200
        assert renewed.http_version == "HTTP/1.1"
        # The full registry is cached for up to a second (EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS).
        deadline = time.monotonic() + 5
        while "SECURE" not in {app["name"] for app in fetch_apps(client)}:
            assert time.monotonic() < deadline, "the registration never showed in the registry"
            time.sleep(0.2)
        assert client.delete("/eureka/apps/SECURE/10.8.0.1:secure:8080").status_code == 200
        assert client.get("/eureka/apps/SECURE").status_code == 404


def fetch_apps(client: httpx.Client) -> list[dict]:
    answer = client.get("/eureka/apps/")
    assert answer.status_code == 200
    return answer.json()["applications"]["application"]


def test_the_plain_port_beside_serves_plain_http_and_the_https_port_only_tls(node):
    with httpx.Client(base_url=f"http://127.0.0.1:{node.plain_port}", headers=JSON, timeout=10) as plain:
        assert register(plain, "PLAIN", "10.8.1.1") == 204
    with node.client() as client:
        # One registry behind both ports.
        assert client.get("/eureka/apps/PLAIN").status_code == 200
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{node.port}/eureka/apps", timeout=5)


def test_plain_http_sent_to_the_https_port_gets_a_tls_alert_and_the_connection_closed(node):
    with socket.create_connection(("127.0.0.1", node.port), timeout=5) as sock:
        sock.sendall(b"GET /eureka/apps HTTP/1.1\r\nHost: node\r\n\r\n")
        answer = b""
        while data := sock.recv(4096):
            answer += data
    # A TLS alert record (content type 21), then the end: no HTTP, nothing held.
    assert answer[:1] == b"\x15", answer
    assert "TLS handshake refused: not TLS" in wait_for_line(node, "not TLS")


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
def test_tls_1_2_and_1_3_are_served_and_older_versions_refused(node):
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        context = node.certs.context(node.certs.client)
        context.minimum_version = context.maximum_version = version
        with (
            socket.create_connection(("127.0.0.1", node.port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            assert tls.version() == version.name.replace("_", ".")
    for version in (ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1):
        context = node.certs.context(node.certs.client)
        # OpenSSL offers these only at security level 0.
        context.set_ciphers("ALL:@SECLEVEL=0")
        context.minimum_version = context.maximum_version = version
        with (
            socket.create_connection(("127.0.0.1", node.port), timeout=5) as raw,
            pytest.raises(ssl.SSLError),
        ):
            context.wrap_socket(raw, server_hostname="127.0.0.1")


@pytest.mark.parametrize(
    ("cipher", "served"),
    [
        ("ECDHE-RSA-AES128-GCM-SHA256", True),
        ("ECDHE-RSA-AES256-GCM-SHA384", True),
        ("ECDHE-RSA-CHACHA20-POLY1305", True),
        # CBC, with or without ECDHE, and RSA key exchange (no forward secrecy): Mozilla "intermediate"
        # has none of them.
        ("ECDHE-RSA-AES128-SHA", False),
        ("ECDHE-RSA-AES256-SHA384", False),
        ("AES128-GCM-SHA256", False),
        ("AES256-SHA256", False),
        ("DHE-RSA-AES128-GCM-SHA256", False),
    ],
)
def test_tls_1_2_offers_aead_suites_with_ecdhe_only(node, cipher, served):
    context = node.certs.context(node.certs.client)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(f"{cipher}:@SECLEVEL=0")
    with socket.create_connection(("127.0.0.1", node.port), timeout=5) as raw:
        if served:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                assert tls.cipher()[0] == cipher
        else:
            with pytest.raises(ssl.SSLError):
                context.wrap_socket(raw, server_hostname="127.0.0.1")


def test_a_renegotiation_is_never_carried_out(node):
    """OpenSSL's client asks for a second handshake on a TLS 1.2 connection ("R" on s_client's
    input); the node never answers it with a ServerHello."""
    openssl = shutil.which("openssl")
    require_toolchain("openssl", openssl is not None, "apt-get install openssl")
    session = subprocess.Popen(
        [
            openssl,
            "s_client",
            "-msg",
            "-tls1_2",
            "-connect",
            f"127.0.0.1:{node.port}",
            "-CAfile",
            node.certs.ca_file,
            "-cert",
            node.certs.client,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        time.sleep(1)
        session.stdin.write(b"R\n")
        session.stdin.flush()
        time.sleep(2)
    finally:
        session.kill()
    output = session.communicate(timeout=10)[0].decode(errors="replace")
    first, found, after = output.partition("RENEGOTIATING")
    assert "ServerHello" in first and found, output[-2000:]
    assert "ClientHello" in after and "ServerHello" not in after, after[-2000:]


@pytest.mark.parametrize(
    ("which", "line"),
    [
        ("", "no client certificate"),
        ("stranger", "a CA not in EUREKA_TLS_CLIENT_CA_FILE"),
        ("expired", "an expired client certificate"),
        ("oversized", "too large"),
    ],
)
def test_a_client_without_a_good_certificate_is_refused_in_the_handshake_and_logged(node, which, line):
    client_cert = getattr(node.certs, which) if which else ""
    assert refused(node, client_cert)
    assert "TLS handshake refused" in wait_for_line(node, line)
    # The node goes on answering the others.
    with node.client() as client:
        assert client.get("/eureka/apps").status_code == 200


def test_handshakes_never_finished_are_ended_and_do_not_stop_heartbeats_from_others(node):
    """10,000 connections from one address that never send a ClientHello: granian (tls-listener) ends
    each after its 10 s handshake timeout, holds no thread or application turn for them meanwhile,
    and heartbeats from another address, on new connections each time, are answered at once."""
    count = 10_000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < count + 1024:
        pytest.skip(f"needs {count + 1024} open files, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, count + 1024), hard))
    with node.client() as client:
        assert register(client, "BEATING", "10.8.2.1") == 204
    held: list[socket.socket] = []
    try:
        opened = time.monotonic()
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.7", 0))
            sock.connect(("127.0.0.1", node.port))
            held.append(sock)
        slowest = 0.0
        with node.client() as client:
            for _ in range(20):
                started = time.monotonic()
                renewed = client.put(
                    "/eureka/apps/BEATING/10.8.2.1:beating:8080", headers={"Connection": "close"}
                )
                assert renewed.status_code == 200
                slowest = max(slowest, time.monotonic() - started)
        assert slowest < 1.0, f"a heartbeat on a new connection took {slowest:.2f} s"
        # Each silent connection is closed by the node after the handshake timeout.
        last = held[-1]
        last.settimeout(max(1.0, opened + 20 - time.monotonic()))
        assert last.recv(1) == b""
        assert time.monotonic() - opened >= 9
        line = wait_for_line(node, "not finished within")
        assert "127.0.0.7" in line
    finally:
        for sock in held:
            sock.close()
    # One line, or a few, for ten thousand: counted, not logged one by one.
    assert sum("not finished within" in line for line in node.log_text().splitlines()) <= 2


def test_optional_client_certificates_stop_the_node_at_start_saying_what_to_use(tmp_path, certs):
    env = {
        "EUREKA_TLS_CERT_FILE": certs.chain,
        "EUREKA_TLS_KEY_FILE": certs.key,
        "EUREKA_TLS_CLIENT_AUTH": "optional",
        "EUREKA_TLS_CLIENT_CA_FILE": certs.ca_file,
    }
    process = start(tmp_path, env, free_port())
    try:
        assert process.wait(timeout=30) != 0
    finally:
        _stop(process)
    said = (tmp_path / "server.log").read_text()
    assert "EUREKA_TLS_CLIENT_AUTH=optional cannot be served by granian" in said
    assert "gunicorn" in said and "EUREKA_CLIENT_CERT_HEADER" in said


def served_or_cut(node: TlsNode, cut: list[str]) -> bytes | None:
    """``served_certificate``, or None (noted in ``cut``) when the handshake was cut."""
    try:
        return served_certificate(node)
    except (ssl.SSLError, ConnectionError) as error:
        cut.append(repr(error))
        return None


def served_certificate(node: TlsNode) -> bytes:
    """The certificate a new connection to the node's HTTPS port gets (DER)."""
    context = node.certs.context(node.certs.client)
    with (
        socket.create_connection(("127.0.0.1", node.port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        return tls.getpeercert(binary_form=True)


def replace_file(path: str, content: bytes) -> None:
    """As cert-manager and Vault's agent do: the new file whole, under the old name at once."""
    temporary = Path(f"{path}.new")
    temporary.write_bytes(content)
    temporary.replace(path)


def test_new_certificate_files_are_served_without_a_restart_while_a_client_heartbeats(tmp_path):
    """The chain and key are replaced under a client heartbeating on a kept-alive connection: no
    heartbeat fails, new connections get the new certificate within seconds, the node is the same
    process with the same registry; files that do not load leave the old certificate in place."""
    certs = Certificates(tmp_path)
    with tls_node(tmp_path, certs, {"LOG_LEVEL": "INFO"}) as node:
        first = served_certificate(node)
        pid = node.process.pid
        with node.client() as client:
            assert register(client, "ROTATED", "10.8.3.1") == 204
        failures: list[str] = []
        beats = [0]
        stop = threading.Event()

        def heartbeat():
            with node.client() as client:
                while not stop.is_set():
                    try:
                        status = client.put("/eureka/apps/ROTATED/10.8.3.1:rotated:8080").status_code
                        if status != 200:
                            failures.append(f"status {status}")
                    except httpx.TransportError as error:
                        failures.append(repr(error))
                    beats[0] += 1
                    time.sleep(0.02)

        beating = threading.Thread(target=heartbeat, daemon=True)
        beating.start()
        try:
            time.sleep(1)
            renewed = certs.ca.issue_cert(
                "127.0.0.1", "localhost", "rotated.example", key_type=trustme.KeyType.RSA
            )
            replace_file(certs.key, renewed.private_key_pem.bytes())
            replace_file(certs.chain, b"".join(pem.bytes() for pem in renewed.cert_chain_pems))
            deadline = time.monotonic() + 10
            # A handshake under way on the old worker as it is retired is cut (docs/tls.md, "On
            # granian"): a probe caught in that instant counts as not yet, and there are at most a few.
            cut: list[str] = []
            while served_or_cut(node, cut) in (first, None):
                assert time.monotonic() < deadline, "new connections still get the old certificate"
                time.sleep(0.2)
            assert len(cut) <= 2, cut
            assert served_certificate(node) == ssl.PEM_cert_to_DER_cert(
                renewed.cert_chain_pems[0].bytes().decode()
            )
            assert "TLS certificate reloaded" in wait_for_line(node, "reloaded")
            # A new client CA: its clients are let in once the bundle names it.
            other_ca = trustme.CA()
            newcomer = certs.leaf("newcomer.pem", other_ca.issue_cert("payments.example"))
            assert refused(node, newcomer)
            replace_file(certs.ca_file, certs.ca.cert_pem.bytes() + other_ca.cert_pem.bytes())
            deadline = time.monotonic() + 10
            while refused(node, newcomer):
                assert time.monotonic() < deadline, "a client of the new CA is still refused"
                time.sleep(0.2)
            time.sleep(1)
            # A key that is not the certificate's: refused, logged, the new certificate stays.
            served = served_certificate(node)
            replace_file(certs.key, trustme.CA().issue_cert("127.0.0.1").private_key_pem.bytes())
            line = wait_for_line(node, "still serving the previous ones", timeout_s=10)
            assert certs.key in line and "/proc/" not in line
            assert served_certificate(node) == served
            time.sleep(1)
        finally:
            stop.set()
            beating.join(timeout=10)
        assert beats[0] > 50
        assert failures == [], failures
        assert node.process.pid == pid and node.process.poll() is None
        with node.client() as client:
            assert client.get("/eureka/apps/ROTATED").status_code == 200
