"""Celery tasks as a worker runs them: they reach the node's control endpoint over HTTP."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from registry.runtime import tasks

SECRET = "s3cret-for-tests"


class _ControlEndpoint(BaseHTTPRequestHandler):
    """A stand-in for the node's control endpoint that records who asked what, on which connection."""

    protocol_version = "HTTP/1.1"  # keep-alive, as gunicorn serves the node

    def do_POST(self):  # noqa: N802 (the stdlib's name)
        self.server.seen.append((self.path, self.headers.get(tasks.CONTROL_HEADER), self.client_address))
        body = json.dumps({"job": self.path.rsplit("/", 1)[-1], "ran": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def control_endpoint(settings):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ControlEndpoint)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.EUREKA = settings.EUREKA.with_changes(
        control_url=f"http://127.0.0.1:{server.server_address[1]}", control_secret=SECRET
    )
    tasks._control_client.cache_clear()
    try:
        yield server
    finally:
        tasks._control_client.cache_clear()
        server.shutdown()
        server.server_close()


def test_node_jobs_reuse_one_kept_alive_connection_to_the_node(control_endpoint):
    """Beat sends several jobs a second: each must not build a new HTTP client (an SSL context, tens of
    milliseconds of CPU) and a new connection."""
    answers = [tasks.run_node_job.run(job) for job in ("evict", "sync_response_cache", "evict")]

    assert [answer["job"] for answer in answers] == ["evict", "sync_response_cache", "evict"]
    paths = [path for path, _, _ in control_endpoint.seen]
    assert paths == ["/control/jobs/evict", "/control/jobs/sync_response_cache", "/control/jobs/evict"]
    assert {secret for _, secret, _ in control_endpoint.seen} == {SECRET}
    client_ports = {address[1] for _, _, address in control_endpoint.seen}
    assert len(client_ports) == 1, f"one connection expected, the jobs came over {len(client_ports)}"
