"""A live node (deploy conf, gevent worker) notices a stall of its event loop, logs it and counts it.

The stall is made from outside: the worker process is stopped (SIGSTOP) for half a second, which holds
its loop as any long computation would, and then continued. The log line must say that the process
did not compute meanwhile (CPU far below the stall), which is what tells a busy machine or paging
from the node's own code.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.interop.conftest import running_server

pytestmark = pytest.mark.live


def worker_pid(master_pid: int) -> int:
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    assert len(children) == 1, f"one worker expected, found {children}"
    return int(children[0])


def loop_metrics(base_url: str) -> dict[str, float]:
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("eureka_event_loop_")
    }


def wait_for_line(log: Path, pattern: str, timeout_s: float = 10) -> re.Match:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace"))
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"no line matching {pattern!r} in the server log:\n{log.read_text()[-3000:]}")


def test_a_stopped_worker_is_reported_as_a_stall_in_which_the_process_did_not_compute(tmp_path):
    with running_server(tmp_path) as server:
        before = loop_metrics(server.base_url)
        assert before == {
            "eureka_event_loop_stalls_total": 0.0,
            "eureka_event_loop_stalled_seconds_total": 0.0,
            "eureka_event_loop_longest_stall_seconds": 0.0,
        }, "an idle node does not stall"

        worker = worker_pid(server.process.pid)
        os.kill(worker, signal.SIGSTOP)
        try:
            time.sleep(0.5)
        finally:
            os.kill(worker, signal.SIGCONT)

        found = wait_for_line(
            server.server_log_path,
            r"event loop held: its beat came (\d+) ms late; process CPU (\d+) ms .*? longest gap (\d+) ms",
        )
        late_ms, cpu_ms, watcher_gap_ms = (int(number) for number in found.groups())
        assert 350 <= late_ms < 5000, found.group(0)
        assert cpu_ms < late_ms / 2, f"a stopped process computes nothing: {found.group(0)}"
        assert watcher_gap_ms >= late_ms / 2, f"the watcher was stopped too: {found.group(0)}"

        after = loop_metrics(server.base_url)
        assert after["eureka_event_loop_stalls_total"] >= 1
        assert after["eureka_event_loop_longest_stall_seconds"] * 1000 >= late_ms - 1
        assert (
            after["eureka_event_loop_stalled_seconds_total"]
            >= after["eureka_event_loop_longest_stall_seconds"]
        )
