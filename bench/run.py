"""The benchmarks' one entry point: ``python bench/run.py NAME [ARGS]`` runs benchmark NAME with its own
options (``python bench/run.py NAME --help`` lists them); ``python bench/run.py --list`` lists them all.

Every benchmark that starts a server starts it through bench/nodes.py. None runs in ``make test``: the
machine is shared, and they take minutes. ``make bench`` runs ``phases --start --runs 3``.
"""

from __future__ import annotations

import ast
import contextlib
import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

# name -> (file in bench/, the bench/README.md section with its results)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "phases": ("phases.py", "Results: gunicorn worker class (one worker)"),
    "workers": ("compare_workers.sh", "Results: gunicorn worker class (one worker)"),
    "compare": ("compare.sh", "Side by side with Spring Cloud Eureka Server"),
    "cores": ("cores.py", "Side by side with Spring Cloud Eureka Server"),
    "churn_stall": ("churn_stall.py", "Heartbeats under churn"),
    "console_page": ("console_page.py", "Console pages with 10,000 instances"),
    "feed_cost": ("feed_cost.py", "Change feed cost"),
    "history_cost": ("setting_cost.py", "Console history cost"),
    "health_round": ("health_round.py", "Health checks"),
    "junk_names": ("junk_names.py", "Junk names"),
    "memory_cost": ("memory_cost.py", "Memory at 100,000 instances"),
    "mesh": ("mesh.py", "Mesh: xDS and DNS"),
    "metrics_cost": ("metrics_cost.py", "Metrics cost"),
    "readers": ("readers.py", "Readers"),
    "rebuild_cost": ("rebuild_cost.py", "Payload rebuilds and the garbage collector"),
    "replication_batch": ("replication_batch.py", "Replication"),
    "replication_flood": ("replication_flood.py", "Replication batch floods"),
    "replication_lag": ("replication_lag.py", "Replication"),
    "setting_cost": ("setting_cost.py", "API accounts cost"),
    "slow_clients": ("slow_clients.py", "Slow clients"),
    "attacks": ("attacks.py", "Attacks, round two"),
    "soak": ("soak.py", "Soak"),
    "tls": ("tls.py", "What TLS costs"),
    "stack_eviction": ("stack_eviction.py", "Eviction on a running stack"),
    "warm_restart": ("warm_restart.py", "Warm restart"),
}

# Benchmarks that are another's script with arguments of their own, put before the caller's.
PRESETS: dict[str, list[str]] = {
    "history_cost": [
        *("--a", "EUREKA_DASHBOARD_HISTORY_INTERVAL_MS=0"),
        *("--b", "EUREKA_DASHBOARD_HISTORY_INTERVAL_MS=10000"),
    ],
}

# Scripts that a listed benchmark runs, not run on their own: file -> benchmark name.
PARTS: dict[str, str] = {"compare.py": "compare"}


def summary(file: str) -> str:
    """The first line of the script's docstring (Python) or of its header comment (shell), read without
    running it: some benchmarks set up Django on import."""
    text = (BENCH / file).read_text()
    if file.endswith(".py"):
        doc = ast.get_docstring(ast.parse(text)) or ""
        return doc.split("\n\n")[0].replace("\n", " ")
    paragraph = []
    for line in text.splitlines()[1:]:
        words = line.lstrip("#").strip()
        if not line.startswith("#") or not words:
            break
        paragraph.append(words)
    return " ".join(paragraph)


def usage() -> str:
    width = max(map(len, BENCHMARKS))
    rows = [f"  {name:<{width}}  {summary(file)}" for name, (file, _) in BENCHMARKS.items()]
    return "usage: python bench/run.py NAME [ARGS]   (NAME --help: its options)\n\n" + "\n".join(rows)


def command(name: str, args: list[str]) -> list[str]:
    file = BENCH / BENCHMARKS[name][0]
    args = [*PRESETS.get(name, []), *args]
    if file.suffix == ".sh":
        return ["bash", str(file), *args]
    return [sys.executable, str(file), *args]


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip() + "\n\n" + usage())
        return 0 if argv else 2
    if argv[0] == "--list":
        with contextlib.suppress(BrokenPipeError):  # `run.py --list | head`
            print(usage())
        return 0
    name, args = argv[0], argv[1:]
    if name not in BENCHMARKS:
        print(f"run.py: no benchmark {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    # The benchmark replaces this process: its exit status, its signals (Ctrl-C reaches it directly).
    os.chdir(ROOT)
    run = command(name, args)
    os.execvp(run[0], run)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
