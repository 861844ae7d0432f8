#!/usr/bin/env bash
# Side-by-side: the same benchmark against one node per gunicorn worker configuration.
#
#   bench/compare_workers.sh                 # 3 runs of each configuration, 10 s phases
#   RUNS=5 DURATION=15 bench/compare_workers.sh
#
# Every configuration gets a fresh node (bench/run.py phases --start) for every run. Prints one table of
# medians; the raw output of every run stays in the printed directory.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

runs="${RUNS:-3}"
duration="${DURATION:-10}"
warmup="${WARMUP:-3}"
conc="${CONC:-16}"
renew_rate="${RENEW_RATE:-1000}"
port="${PORT:-28761}"
out="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/eureka-bench-compare.XXXXXX")}"
configs="${CONFIGS:-sync gthread-4 gthread-8 gthread-16 gthread-32 gevent}"

for config in $configs; do
    case "$config" in
        sync) args=(--worker-class sync) ;;
        gthread-*) args=(--worker-class gthread --threads "${config#gthread-}") ;;
        gevent) args=(--worker-class gevent --worker-connections 1000) ;;
        *) echo "compare_workers.sh: unknown configuration $config" >&2; exit 2 ;;
    esac
    echo "######## $config"
    .venv/bin/python bench/run.py phases --start --port "$port" "${args[@]}" --runs "$runs" --duration "$duration" \
        --warmup "$warmup" -c "$conc" --renew-rate "$renew_rate" --out "$out/$config" | tail -n 9
done

median() {
    sort -g | awk '{ v[NR] = $1 }
        END {
            if (NR == 0) { print "-"; exit }
            if (NR % 2) { print v[(NR + 1) / 2] } else { printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }
        }'
}

value() {
    awk -v p="$2" -v m="$3" '$1 == p && $2 == m { print $3 }' "$out/$1"/run-*.txt | median
}

echo
echo "== medians of $runs runs, c=$conc, ${duration} s phases after ${warmup} s warm-up"
printf '%-11s | %8s %7s %7s %7s | %7s %7s | %8s %7s | %8s | %8s\n' \
    config renew/s p50 p99 errors "p50@$renew_rate" "p99@$renew_rate" full/s p99 delta/s register/s
for config in $configs; do
    printf '%-11s | %8s %7s %7s %7s | %7s %7s | %8s %7s | %8s | %8s\n' "$config" \
        "$(value "$config" renew req/s)" "$(value "$config" renew p50_ms)" \
        "$(value "$config" renew p99_ms)" "$(value "$config" renew errors)" \
        "$(value "$config" "renew@$renew_rate" p50_ms)" "$(value "$config" "renew@$renew_rate" p99_ms)" \
        "$(value "$config" full req/s)" "$(value "$config" full p99_ms)" \
        "$(value "$config" delta req/s)" "$(value "$config" register req/s)"
done
echo "raw results: $out"
