#!/usr/bin/env bash
# Benchmark a registry node: register -> renew -> full fetch -> delta fetch, repeated, with medians.
#
#   bench/run.sh --start                       # start a node here (default gthread conf), run, stop it
#   bench/run.sh --start --worker-class gevent --worker-connections 1000 --runs 3
#   bench/run.sh --url http://127.0.0.1:8761/eureka/   # a node that is already running
#
# See bench/README.md for every option and for how to read the numbers.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

url=""
start=0
port=28761
worker_class=""
threads=""
worker_connections=""
runs=1
n=10000
apps=100
duration=15
warmup=3
conc=16
fetch_conc=""
renew_rate=""
phases="register renew full delta"
out=""
pin=0

usage() {
    cat <<'EOF'
usage: bench/run.sh [options]
  --start                  start a node (.venv gunicorn, deploy/gunicorn.conf.py) for each run, stop it after
  --port PORT              port of the node started with --start (default 28761; must be free)
  --worker-class K         sync | gthread | gevent (with --start; default: the conf's gthread)
  --threads N              gthread threads (with --start; default: the conf's 16)
  --worker-connections N   gevent/gthread connection limit (with --start)
  --url URL                base URL of a running node (default http://127.0.0.1:PORT/eureka/)
  --runs K                 repeat the whole sequence K times and report medians (default 1)
  -n N                     instances (default 10000)
  --apps A                 applications the instances are spread over (default 100)
  --duration T             measured seconds per timed phase (default 15)
  --warmup W               unrecorded seconds before each timed phase (default 3)
  -c C                     connections for register/renew (default 16)
  --fetch-c C              connections for full/delta (default: same as -c)
  --renew-rate R           also run a renew phase paced at R requests/s (latency at a fixed load)
  --phases "LIST"          subset/order of: register renew full delta (default all four)
  --out DIR                keep raw results in DIR (default: a new temporary directory)
  --pin                    with --start: pin the node to CPU 1 and the load generator to CPU 0
EOF
}

need_value() {
    if [[ $# -lt 2 || -z "$2" ]]; then
        echo "run.sh: $1 needs a value" >&2
        exit 2
    fi
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --start) start=1; shift ;;
        --pin) pin=1; shift ;;
        --port) need_value "$@"; port="$2"; shift 2 ;;
        --worker-class) need_value "$@"; worker_class="$2"; shift 2 ;;
        --threads) need_value "$@"; threads="$2"; shift 2 ;;
        --worker-connections) need_value "$@"; worker_connections="$2"; shift 2 ;;
        --url) need_value "$@"; url="$2"; shift 2 ;;
        --runs) need_value "$@"; runs="$2"; shift 2 ;;
        -n) need_value "$@"; n="$2"; shift 2 ;;
        --apps) need_value "$@"; apps="$2"; shift 2 ;;
        --duration) need_value "$@"; duration="$2"; shift 2 ;;
        --warmup) need_value "$@"; warmup="$2"; shift 2 ;;
        -c) need_value "$@"; conc="$2"; shift 2 ;;
        --fetch-c) need_value "$@"; fetch_conc="$2"; shift 2 ;;
        --renew-rate) need_value "$@"; renew_rate="$2"; shift 2 ;;
        --phases) need_value "$@"; phases="$2"; shift 2 ;;
        --out) need_value "$@"; out="$2"; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "run.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
done

for value in "$port" "$runs"; do
    if ! [[ "$value" =~ ^[0-9]+$ ]] || ((value < 1)); then
        echo "run.sh: --port and --runs take positive integers" >&2
        exit 2
    fi
done
if ((runs > 20)); then
    echo "run.sh: at most 20 runs" >&2
    exit 2
fi
case "$worker_class" in
    "" | sync | gthread | gevent) ;;
    *) echo "run.sh: --worker-class must be sync, gthread or gevent" >&2; exit 2 ;;
esac
for phase in $phases; do
    case "$phase" in
        register | renew | full | delta) ;;
        *) echo "run.sh: unknown phase $phase" >&2; exit 2 ;;
    esac
done
if [[ "$worker_class" == sync && -n "$threads" && "$threads" != 1 ]]; then
    echo "run.sh: the sync worker has one thread; --threads does not apply" >&2
    exit 2
fi
if ((start == 0)) && [[ -n "$worker_class$threads$worker_connections" ]]; then
    echo "run.sh: --worker-class/--threads/--worker-connections only apply with --start" >&2
    exit 2
fi
url="${url:-http://127.0.0.1:${port}/eureka/}"
fetch_conc="${fetch_conc:-$conc}"
if [[ -z "$out" ]]; then
    out="$(mktemp -d "${TMPDIR:-/tmp}/eureka-bench.XXXXXX")"
fi
mkdir -p "$out"

server_cpu=()
loadgen_cpu=()
if ((pin == 1)); then
    if ((start == 0)) || ! command -v taskset >/dev/null; then
        echo "run.sh: --pin needs --start and taskset" >&2
        exit 2
    fi
    server_cpu=(taskset -c 1)
    loadgen_cpu=(taskset -c 0)
fi

echo "== building the load generator"
(cd bench/loadgen && go build -o ../bin/loadgen .)
loadgen=bench/bin/loadgen

node_pid=""
node_pids=""

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start_node() {
    local log="$1"
    if port_in_use "$port"; then
        echo "run.sh: something already listens on 127.0.0.1:$port; pick another --port" >&2
        exit 1
    fi
    if [[ ! -x .venv/bin/gunicorn ]]; then
        echo "run.sh: .venv/bin/gunicorn not found: run 'make install' first" >&2
        exit 1
    fi
    local args=(-c deploy/gunicorn.conf.py --bind "127.0.0.1:$port")
    [[ -n "$worker_class" ]] && args+=(--worker-class "$worker_class")
    if [[ "$worker_class" == sync ]]; then
        # gunicorn silently turns "sync" into gthread when threads > 1, and the conf sets 16.
        args+=(--threads 1)
    elif [[ -n "$threads" ]]; then
        args+=(--threads "$threads")
    fi
    [[ -n "$worker_connections" ]] && args+=(--worker-connections "$worker_connections")
    # gunicorn >= 24 opens a control socket at one fixed path per user: keep ours from taking over
    # (and later deleting) the socket of a node that someone else runs on this machine.
    if .venv/bin/gunicorn --help 2>/dev/null | grep -q -- --no-control-socket; then
        args+=(--no-control-socket)
    fi
    # A data directory of its own per start: warm restart stays on, as deployed, but never restores
    # an earlier run's registry; the database stays where make run keeps it.
    local data_dir="$out/data-$RANDOM$RANDOM"
    mkdir -p "$data_dir"
    EUREKA_DATA_DIR="$data_dir" DATABASE_URL="${DATABASE_URL:-sqlite:///$PWD/var/db.sqlite3}" \
        "${server_cpu[@]}" .venv/bin/gunicorn "${args[@]}" >"$log" 2>&1 &
    node_pid=$!
    local i
    for ((i = 0; i < 100; i++)); do
        if ! kill -0 "$node_pid" 2>/dev/null; then
            echo "run.sh: the node exited during start-up; its log:" >&2
            cat "$log" >&2
            exit 1
        fi
        if port_in_use "$port" && [[ -r "/proc/$node_pid/task/$node_pid/children" ]]; then
            local worker
            worker="$(tr -s ' ' ',' <"/proc/$node_pid/task/$node_pid/children")"
            if [[ -n "${worker%,}" ]]; then
                node_pids="$node_pid,${worker%,}"
                return 0
            fi
        fi
        sleep 0.2
    done
    echo "run.sh: the node did not come up within 20 s" >&2
    exit 1
}

stop_node() {
    if [[ -n "$node_pid" ]] && kill -0 "$node_pid" 2>/dev/null; then
        kill -TERM "$node_pid"
        local i
        for ((i = 0; i < 100; i++)); do
            kill -0 "$node_pid" 2>/dev/null || break
            sleep 0.2
        done
        if kill -0 "$node_pid" 2>/dev/null; then
            kill -KILL "$node_pid" 2>/dev/null || true
        fi
        wait "$node_pid" 2>/dev/null || true
    fi
    node_pid=""
    node_pids=""
}
trap stop_node EXIT
trap 'exit 130' INT TERM

loadgen_phase() {
    local mode="$1"
    shift
    local pid_args=()
    [[ -n "$node_pids" ]] && pid_args=(-server-pid "$node_pids")
    "${loadgen_cpu[@]}" "$loadgen" -url "$url" -mode "$mode" -n "$n" -apps "$apps" \
        -duration "$duration" -warmup "$warmup" "${pid_args[@]}" "$@"
}

for ((run = 1; run <= runs; run++)); do
    result="$out/run-$run.txt"
    : >"$result"
    echo "== run $run/$runs -> $result"
    if ((start == 1)); then
        start_node "$out/node-$run.log"
        echo "   node pids $node_pids: $(grep -o 'Using worker: .*' "$out/node-$run.log" || echo 'worker class unknown')"
    fi
    for phase in $phases; do
        case "$phase" in
            register | renew) loadgen_phase "$phase" -c "$conc" | tee -a "$result" ;;
            full | delta) loadgen_phase "$phase" -c "$fetch_conc" | tee -a "$result" ;;
        esac
        if [[ "$phase" == renew && -n "$renew_rate" ]]; then
            loadgen_phase renew -c "$conc" -rate "$renew_rate" -label "renew@$renew_rate" | tee -a "$result"
        fi
    done
    if ((start == 1)); then
        stop_node
    fi
done

median() {
    sort -g | awk '{ v[NR] = $1 }
        END {
            if (NR == 0) { print "-"; exit }
            if (NR % 2) { print v[(NR + 1) / 2] } else { printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }
        }'
}

metric_values() {
    awk -v p="$1" -v m="$2" '$1 == p && $2 == m { print $3 }' "$out"/run-*.txt
}

echo
echo "== summary: median of $runs run(s); url=$url n=$n apps=$apps c=$conc fetch-c=$fetch_conc"
if ((start == 1)); then
    echo "   node: ${worker_class:-deploy/gunicorn.conf.py worker} ${threads:+threads=$threads }${worker_connections:+worker-connections=$worker_connections}"
fi
labels="$phases"
[[ -n "$renew_rate" ]] && labels="${labels/renew/renew renew@$renew_rate}"
printf '%-14s %9s %8s %8s %8s %8s %7s %10s %7s %7s  %s\n' \
    phase req/s p50_ms p90_ms p99_ms max_ms errors bytes/resp srv_cpu cli_cpu "req/s per run"
for label in $labels; do
    row=()
    for metric in req/s p50_ms p90_ms p99_ms max_ms errors bytes/resp server_cpu_cores client_cpu_cores; do
        row+=("$(metric_values "$label" "$metric" | median)")
    done
    per_run="$(metric_values "$label" req/s | paste -sd ' ' -)"
    printf '%-14s %9s %8s %8s %8s %8s %7s %10s %7s %7s  %s\n' "$label" "${row[@]}" "$per_run"
done
echo "raw results: $out"
