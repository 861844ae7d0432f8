"""What HTTPS costs: renews over kept-alive HTTPS connections and renews with a new connection (a full TLS
handshake) per request, against a node of ours and a warm Spring Cloud Eureka Server (SCE) serving the
same certificate, each beside its own plain HTTP, in one run; medians, p99, throughput and the ratios.

    .venv/bin/python bench/run.py tls                       # gunicorn and SCE, 2 rounds (about 8 min)
    .venv/bin/python bench/run.py tls --servers gunicorn,granian --rounds 3
    .venv/bin/python bench/run.py tls --no-sce              # no Java needed

Everything is made at run time and on loopback only: a CA and a server certificate for 127.0.0.1 and
localhost (trustme; ECDSA P-256 by default, ``--key-type rsa`` for RSA 2048), the PEM chain and key for
our node (``EUREKA_TLS_CERT_FILE``, ``EUREKA_TLS_KEY_FILE``) and the same key and chain as a PKCS12 key
store for SCE (``server.ssl.key-store``, Spring Boot's own HTTPS). Four servers per HTTP server of ours
run side by side (bench/nodes.py starts them all): ours over HTTPS, ours over plain HTTP, SCE over HTTPS,
SCE over plain HTTP, each its own process with the same settings otherwise; ``--n`` instances are
registered on each. Neither side evicts during the run (its eviction timer set to an hour): each
server's leases go unrenewed for minutes while the others are measured.

SCE's JIT needs load before it is at its best (bench/README.md, "Side by side"), so each SCE gets
``--warm-up`` seconds (60) of the same load first, kept-alive renews then renews on new connections,
recorded nowhere; ours gets ``--ours-warm-up`` (15). Then, ``--rounds`` times, each phase runs against
every server in turn (the order reversed every other round, so machine noise falls on all alike):

  keep-alive  renews, closed loop, ``-c`` connections (16) each kept alive: TLS's cost per request
  new-conn    renews, closed loop, ``--new-conn-c`` connections (8), a new one for every request with
              no session resumption: a full handshake per renew, what a client that does not keep its
              connection pays

The load generator (bench/bin/loadgen, Go) verifies the certificate against the run's CA and reports
the server's CPU. The table has the medians over rounds of throughput, p50 and p99 and the server's
CPU per 1,000 requests, then the ratios ours/SCE (per transport and phase) and TLS/plain (per server
and phase). The machine's load average and the CPU others took during each phase are printed too: on a
shared machine they say how far to trust the figures. Every server is stopped at the end, on Ctrl-C
and errors too; every phase is bounded in time.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import shlex
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from nodes import HOST, HTTP_SERVERS, LOADGEN, ROOT, Node, Server, build_loadgen, loadgen_metrics, stop_all
from nodes import spring_eureka as sce_process

PHASES = ("keep-alive", "new-conn")
# Eviction off on both sides (its timer an hour): each server's leases go unrenewed for minutes while
# the others are measured, and a renew of an evicted instance is a 404, not the renew measured here.
EVICTION_INTERVAL_MS = 3_600_000
KEYSTORE_PASSWORD = "bench-keystore"
START_TIMEOUT_S = {"sce": 240.0, "ours": 90.0}


# ------------------------------------------------------------------------------------ certificates


@dataclass
class Certificates:
    ca: Path
    chain: Path
    key: Path
    keystore: Path


def make_certificates(folder: Path, key_type: str) -> Certificates:
    """A CA and a server certificate for 127.0.0.1 and localhost: PEM files for our node and the
    load generator, the same key and chain as a PKCS12 key store for SCE."""
    import trustme
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    kind = trustme.KeyType.ECDSA if key_type == "ecdsa" else trustme.KeyType.RSA
    ca = trustme.CA(key_type=kind)
    issued = ca.issue_cert("127.0.0.1", "localhost", key_type=kind)
    folder.mkdir(parents=True, exist_ok=True)
    certificates = Certificates(
        folder / "ca.pem", folder / "chain.pem", folder / "key.pem", folder / "node.p12"
    )
    ca.cert_pem.write_to_path(str(certificates.ca))
    with certificates.chain.open("wb") as out:
        for blob in issued.cert_chain_pems:
            out.write(blob.bytes())
    issued.private_key_pem.write_to_path(str(certificates.key))
    key = serialization.load_pem_private_key(issued.private_key_pem.bytes(), password=None)
    leaf, *rest = [x509.load_pem_x509_certificate(blob.bytes()) for blob in issued.cert_chain_pems]
    certificates.keystore.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"eureka",
            key,
            leaf,
            rest or None,
            serialization.BestAvailableEncryption(KEYSTORE_PASSWORD.encode()),
        )
    )
    return certificates


def answers(port: int, path: str, context: ssl.SSLContext | None) -> bool:
    """GET path on 127.0.0.1:port (https with ``context``) answers 200."""
    if context is None:
        connection = http.client.HTTPConnection(HOST, port, timeout=3)
    else:
        connection = http.client.HTTPSConnection(HOST, port, timeout=3, context=context)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


# ------------------------------------------------------------------------------------ servers


@dataclass
class Target:
    """One server under test: ours or SCE, over https or plain http."""

    side: str  # "sce" or the HTTP server of ours ("gunicorn", "granian")
    scheme: str
    server: Server
    results: dict[str, list[dict[str, float]]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        who = "SCE" if self.side == "sce" else f"ours ({self.side})"
        return f"{who} {self.scheme}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{HOST}:{self.server.port}/eureka/"


def start_ours(workdir: Path, http_server: str, certificates: Certificates | None, ssl_context) -> Target:
    env = {
        "LOG_LEVEL": os.environ.get("LOG_LEVEL", "WARNING"),
        "EUREKA_EVICTION_INTERVAL_MS": str(EVICTION_INTERVAL_MS),
    }
    scheme = "http"
    if certificates is not None:
        scheme = "https"
        env |= {"EUREKA_TLS_CERT_FILE": str(certificates.chain), "EUREKA_TLS_KEY_FILE": str(certificates.key)}
    name = f"ours-{http_server}-{scheme}"
    node = Node(workdir / name, env, name=name, log=workdir / f"{name}.log", server=http_server)
    context = ssl_context if certificates is not None else None
    node.start(wait=False)
    node.wait_ready(lambda: answers(node.port, "/healthz", context), timeout=START_TIMEOUT_S["ours"])
    return Target(http_server, scheme, node)


def start_sce(workdir: Path, jar: Path, heap: str, certificates: Certificates | None, ssl_context) -> Target:
    scheme = "https" if certificates is not None else "http"
    folder = workdir / f"sce-{scheme}"
    folder.mkdir(parents=True, exist_ok=True)
    server = sce_process(jar, folder, heap)
    server.command.append(f"--eureka.server.eviction-interval-timer-in-ms={EVICTION_INTERVAL_MS}")
    if certificates is not None:
        # Spring Boot's HTTPS, as SCE users configure it: a PKCS12 key store; its own URL over https.
        server.command = [
            arg.replace(f"http://{HOST}:", f"https://{HOST}:")
            if arg.startswith("--eureka.client.service-url")
            else arg
            for arg in server.command
        ]
        server.command += [
            "--server.ssl.enabled=true",
            f"--server.ssl.key-store={certificates.keystore}",
            "--server.ssl.key-store-type=PKCS12",
            f"--server.ssl.key-store-password={KEYSTORE_PASSWORD}",
            "--server.ssl.enabled-protocols=TLSv1.2,TLSv1.3",
        ]
    server.start()
    context = ssl_context if certificates is not None else None
    server.wait_ready(lambda: answers(server.port, "/eureka/apps", context), timeout=START_TIMEOUT_S["sce"])
    return Target("sce", scheme, server)


# ------------------------------------------------------------------------------------ load


def busy_cores_since(before, seconds: float) -> float:
    """Cores the whole machine kept busy since ``before`` (psutil.cpu_times()), steal included."""

    def busy(t) -> float:
        return sum(getattr(t, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))

    return max(0.0, (busy(psutil.cpu_times()) - busy(before)) / max(seconds, 1e-9))


def loadgen(target: Target, args, certificates: Certificates, raw: Path, mode: str, **options) -> dict:
    """One run of the load generator against ``target``; its metrics, plus ``other_cores``: what the
    rest of the machine took meanwhile."""
    command = [str(LOADGEN), "-url", target.url, "-mode", mode, "-n", str(args.n), "-apps", str(args.apps)]
    if target.scheme == "https":
        command += ["-ca-file", str(certificates.ca)]
    for key, value in options.items():
        command += (
            [f"-{key.replace('_', '-')}", str(value)] if value is not True else [f"-{key.replace('_', '-')}"]
        )
    command += ["-server-pid", ",".join(map(str, target.server.pids()))]
    bound = (
        120 + args.n / 20
        if mode == "register"
        else float(options.get("warmup", 0)) + float(options.get("duration", 0)) + 60
    )
    cpu_before, wall_before = psutil.cpu_times(), time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=bound)
    except subprocess.TimeoutExpired as exc:
        raise SystemExit(f"tls.py: loadgen {mode} against {target.label} ran over {bound:.0f} s") from exc
    busy = busy_cores_since(cpu_before, time.monotonic() - wall_before)
    with raw.open("a") as out:
        out.write(f"# {target.label}\n$ {shlex.join(command)}\n{done.stdout}{done.stderr}\n")
    metrics = loadgen_metrics(done.stdout)
    if done.returncode != 0 or "req/s" not in metrics:
        why = done.stderr.strip()[-800:]
        raise SystemExit(f"tls.py: loadgen {mode} against {target.label} exited {done.returncode}: {why}")
    if not target.server.alive():
        raise SystemExit(f"tls.py: {target.label} died:\n{target.server.log_tail()}")
    metrics["other_cores"] = max(
        0.0, busy - metrics.get("server_cpu_cores", 0.0) - metrics.get("client_cpu_cores", 0.0)
    )
    return metrics


def phase_options(args, phase: str, duration: float, warmup: float) -> dict:
    if phase == "keep-alive":
        return {"c": args.c, "duration": duration, "warmup": warmup}
    return {"c": args.new_conn_c, "duration": duration, "warmup": warmup, "new_conn": True}


def warm_up(targets: list[Target], args, certificates: Certificates, raw: Path) -> None:
    for target in targets:
        seconds = args.warm_up if target.side == "sce" else args.ours_warm_up
        if seconds <= 0:
            continue
        print(f"== warm-up: {target.label}, {seconds:g} s of the same load", flush=True)
        for phase in PHASES:
            loadgen(target, args, certificates, raw, "renew", **phase_options(args, phase, seconds / 2, 0))


# ------------------------------------------------------------------------------------ report


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def figures(target: Target, phase: str) -> dict[str, float]:
    runs = target.results.get(phase, [])
    per_k = [1000 * r.get("server_cpu_cores", 0.0) / r["req/s"] for r in runs if r.get("req/s")]
    return {
        "req/s": median([r["req/s"] for r in runs]),
        "p50_ms": median([r["p50_ms"] for r in runs]),
        "p99_ms": median([r["p99_ms"] for r in runs]),
        "cpu_s_per_1k": median(per_k),
        "errors": sum(r.get("errors", 0.0) for r in runs),
        "other_cores": median([r.get("other_cores", 0.0) for r in runs]),
    }


def ratio(a: float, b: float) -> str:
    if not b or b != b or a != a:
        return "n/a"
    return f"{a / b:.2f}"


def report(targets: list[Target], args, load_before, load_after, out: Path) -> str:
    lines = [
        f"# bench/tls.py: {args.rounds} round(s), n={args.n}, keep-alive c={args.c} {args.duration:g} s, "
        f"new-conn c={args.new_conn_c} {args.new_conn_duration:g} s, key {args.key_type}, "
        f"SCE warm-up {args.warm_up:g} s, ours {args.ours_warm_up:g} s",
        f"# load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
        f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}; {os.cpu_count()} cores",
        "",
        "| server | phase | req/s | p50 ms | p99 ms | server CPU s / 1,000 req | errors | others' cores |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for phase in PHASES:
        for target in targets:
            f = figures(target, phase)
            lines.append(
                f"| {target.label} | {phase} | {f['req/s']:,.0f} | {f['p50_ms']:.2f} | {f['p99_ms']:.2f} | "
                f"{f['cpu_s_per_1k']:.3f} | {f['errors']:.0f} | {f['other_cores']:.2f} |"
            )
    by_key = {(t.side, t.scheme): t for t in targets}
    ours_sides = [side for side in dict.fromkeys(t.side for t in targets) if side != "sce"]
    if ("sce", "https") in by_key and ours_sides:
        lines += ["", "Ours / SCE (throughput; p50, p99: < 1 is faster):", ""]
        lines += ["| ours | transport | phase | req/s | p50 | p99 |", "|---|---|---|---|---|---|"]
        for side in ours_sides:
            for scheme in ("https", "http"):
                for phase in PHASES:
                    a, b = by_key.get((side, scheme)), by_key.get(("sce", scheme))
                    if a is None or b is None:
                        continue
                    fa, fb = figures(a, phase), figures(b, phase)
                    lines.append(
                        f"| {side} | {scheme} | {phase} | {ratio(fa['req/s'], fb['req/s'])} | "
                        f"{ratio(fa['p50_ms'], fb['p50_ms'])} | {ratio(fa['p99_ms'], fb['p99_ms'])} |"
                    )
    lines += ["", "TLS / plain, each server against its own plain HTTP:", ""]
    lines += ["| server | phase | req/s | p50 | p99 | CPU / request |", "|---|---|---|---|---|---|"]
    for side in dict.fromkeys(t.side for t in targets):
        tls, plain = by_key.get((side, "https")), by_key.get((side, "http"))
        if tls is None or plain is None:
            continue
        for phase in PHASES:
            ft, fp = figures(tls, phase), figures(plain, phase)
            lines.append(
                f"| {tls.label.rsplit(' ', 1)[0]} | {phase} | {ratio(ft['req/s'], fp['req/s'])} | "
                f"{ratio(ft['p50_ms'], fp['p50_ms'])} | {ratio(ft['p99_ms'], fp['p99_ms'])} | "
                f"{ratio(ft['cpu_s_per_1k'], fp['cpu_s_per_1k'])} |"
            )
    lines += ["", f"raw load generator output: {out / 'loadgen.txt'}"]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ main


def sce_jar(args) -> Path | None:
    """The SCE jar (tests/interop/sce, built through the interop suite's Maven helper), or None with
    the reason printed."""
    if args.no_sce:
        return None
    if args.sce_jar:
        return Path(args.sce_jar)
    if not shutil.which("java") or not shutil.which("mvn"):
        print("== SCE skipped: java or mvn not on PATH", file=sys.stderr)
        return None
    print("== building the SCE jar (tests/interop/sce; reused when built)", flush=True)
    done = subprocess.run(
        [sys.executable, "-m", "tests.interop.maven", "sce"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if done.returncode != 0:
        print(
            f"== SCE skipped: the build exited {done.returncode}: {done.stderr.strip()[-500:]}",
            file=sys.stderr,
        )
        return None
    return Path(done.stdout.strip().splitlines()[-1])


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/run.py tls", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--servers", default=HTTP_SERVERS[0], help="our HTTP servers, comma-separated (gunicorn,granian)"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--n", type=int, default=2000, help="instances registered on each server")
    parser.add_argument("--apps", type=int, default=50)
    parser.add_argument("--c", type=int, default=16, help="kept-alive connections")
    parser.add_argument("--duration", type=float, default=10, help="seconds of each keep-alive phase")
    parser.add_argument("--new-conn-c", type=int, default=8, help="connections of the new-conn phase")
    parser.add_argument("--new-conn-duration", type=float, default=5, help="seconds of each new-conn phase")
    parser.add_argument("--phase-warmup", type=float, default=2, help="unrecorded seconds before each phase")
    parser.add_argument(
        "--warm-up", type=float, default=60, help="seconds of load on each SCE before the rounds"
    )
    parser.add_argument("--ours-warm-up", type=float, default=15, help="the same for ours")
    parser.add_argument("--key-type", choices=("ecdsa", "rsa"), default="ecdsa")
    parser.add_argument("--no-sce", action="store_true", help="ours only (no Java)")
    parser.add_argument("--sce-only", action="store_true", help="SCE only (a branch whose node has no HTTPS)")
    parser.add_argument("--sce-jar", help="a built SCE jar (default: built here)")
    parser.add_argument("--sce-heap", default="1g")
    parser.add_argument("--out", help="directory for the raw output and the servers' logs")
    args = parser.parse_args(argv)
    args.servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    unknown = set(args.servers) - set(HTTP_SERVERS)
    if unknown or not args.servers:
        parser.error(
            f"--servers: each of {', '.join(HTTP_SERVERS)}, not {', '.join(sorted(unknown)) or 'none'}"
        )
    if args.sce_only and args.no_sce:
        parser.error("--sce-only and --no-sce leave nothing to measure")
    if args.rounds < 1 or args.n < 1 or args.c < 1 or args.new_conn_c < 1:
        parser.error("--rounds, --n, --c and --new-conn-c must be at least 1")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="eureka-tls-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "loadgen.txt"
    build_loadgen()
    jar = sce_jar(args)
    certificates = make_certificates(out / "certs", args.key_type)
    context = ssl.create_default_context(cafile=str(certificates.ca))
    load_before = os.getloadavg()
    targets: list[Target] = []
    try:
        for http_server in [] if args.sce_only else args.servers:
            for certs in (certificates, None):
                print(f"== starting ours ({http_server}) over {'https' if certs else 'http'}", flush=True)
                targets.append(start_ours(out, http_server, certs, context))
        if jar is not None:
            for certs in (certificates, None):
                print(f"== starting SCE over {'https' if certs else 'http'}", flush=True)
                targets.append(start_sce(out, jar, args.sce_heap, certs, context))
        for target in targets:
            print(f"== registering {args.n} instances on {target.label}", flush=True)
            loadgen(target, args, certificates, raw, "register", c=args.c)
        warm_up(targets, args, certificates, raw)
        for round_no in range(1, args.rounds + 1):
            order = targets if round_no % 2 else list(reversed(targets))
            for phase in PHASES:
                duration = args.duration if phase == "keep-alive" else args.new_conn_duration
                for target in order:
                    print(f"== round {round_no}: {phase} against {target.label}", flush=True)
                    metrics = loadgen(
                        target, args, certificates, raw, "renew",
                        **phase_options(args, phase, duration, args.phase_warmup),
                    )  # fmt: skip
                    target.results.setdefault(phase, []).append(metrics)
                    print(
                        f"   {metrics['req/s']:,.0f} req/s, p50 {metrics['p50_ms']:.2f} ms, "
                        f"p99 {metrics['p99_ms']:.2f} ms, errors {metrics.get('errors', 0):.0f}",
                        flush=True,
                    )
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        stop_all(t.server for t in targets)
    table = report(targets, args, load_before, os.getloadavg(), out)
    (out / "report.md").write_text(table + "\n")
    print("\n" + table)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main(sys.argv[1:]))
