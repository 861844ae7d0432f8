#!/usr/bin/env bash
# Side by side: one node of this registry and a stock Spring Cloud Eureka Server (SCE) on this machine,
# interleaved SCE, ours, SCE, ours ... so that machine noise falls on both; one table at the end.
#
#   bench/compare.sh                                   # 10,000 instances, 10 s phases, 2 rounds
#   bench/compare.sh --n 2000 --duration 4 --rounds 1  # a quick check that everything works
#   bench/compare.sh --ours-only                       # no Java needed
#   bench/compare.sh --help                            # every option
#
# This script builds the load generator (Go) and the SCE jar (tests/interop/sce, through the interop
# suite's Maven helper, so there is one Maven project), then bench/compare.py starts the servers, runs
# the phases and prints the table. Without java or mvn, SCE is skipped with a message and our node is
# still measured. Every server started here is stopped at the end, on Ctrl-C too.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

python=.venv/bin/python
if [[ ! -x "$python" || ! -x .venv/bin/gunicorn ]]; then
    echo "compare.sh: .venv with gunicorn not found: run 'make install' first" >&2
    exit 1
fi

# The exact command, for the report (the table is only worth something with it).
command_line="bench/compare.sh${*:+ $(printf '%q ' "$@")}"
command_line="${command_line% }"

# Validate the options before building anything; compare.py owns them (--help prints them all).
"$python" bench/compare.py --parse-only "$@"
for arg in "$@"; do
    if [[ "$arg" == -h || "$arg" == --help ]]; then
        exit 0
    fi
done

ours_only=0
sce_only=0
keep_going=0
out=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
        --ours-only) ours_only=1 ;;
        --sce-only) sce_only=1 ;;
        --keep-going) keep_going=1 ;;
        --out) out="${args[i + 1]}" ;;
        --out=*) out="${args[i]#--out=}" ;;
    esac
done
if [[ -z "$out" ]]; then
    out="$(mktemp -d "${TMPDIR:-/tmp}/eureka-compare.XXXXXX")"
fi
mkdir -p "$out"

# Backstop for the servers: compare.py stops them itself (and they get SIGTERM when it dies), but
# should it be killed outright, the pid it left here is the session of the server it was running.
# The command line is checked first, so a recycled pid of someone else's process is left alone.
stop_leftovers() {
    local pid
    [[ -r "$out/server.pids" ]] || return 0
    while read -r pid; do
        [[ "$pid" =~ ^[0-9]+$ ]] || continue
        if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -e 'sce-server\.jar' -e 'gunicorn'; then
            echo "compare.sh: stopping leftover server session $pid" >&2
            kill -TERM -- "-$pid" 2>/dev/null || true
            sleep 5
            kill -KILL -- "-$pid" 2>/dev/null || true
        fi
    done <"$out/server.pids"
}
trap stop_leftovers EXIT
trap 'exit 130' INT TERM

echo "== building the load generator"
(cd bench/loadgen && go build -o ../bin/loadgen .)

sce_args=()
if ((ours_only == 0)); then
    reason=""
    if ! command -v java >/dev/null; then
        reason="java not found on PATH (install a JDK 17+, e.g. openjdk-17-jdk-headless)"
    elif ! command -v mvn >/dev/null; then
        reason="mvn not found on PATH (install Maven 3.8+)"
    else
        echo "== building the SCE jar (tests/interop/sce; first time: Maven downloads, later: reused)"
        status=0
        jar="$("$python" -m tests.interop.maven sce 2>"$out/sce-build.err")" || status=$?
        case "$status" in
            0) sce_args=(--sce-jar "$jar") ;;
            # 2: the helper's "toolchain missing" (old java, Maven Central out of reach).
            2) reason="$(tr '\n' ' ' <"$out/sce-build.err")" ;;
            *)
                cat "$out/sce-build.err" >&2
                if ((keep_going == 0)); then
                    echo "compare.sh: the SCE build failed (see above); --keep-going measures ours anyway" >&2
                    exit 1
                fi
                reason="the SCE build failed (exit $status): see $out/sce-build.err"
                ;;
        esac
    fi
    if [[ -n "$reason" ]]; then
        echo "== SCE skipped: $reason" >&2
        if ((sce_only == 1)); then
            echo "compare.sh: --sce-only, and SCE cannot run here" >&2
            exit 2
        fi
        sce_args=(--sce-skipped "$reason")
    fi
fi

"$python" bench/compare.py "$@" --out "$out" --command "$command_line" "${sce_args[@]}"
