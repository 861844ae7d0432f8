#!/usr/bin/env bash
# The benchmarks' entry point from a shell: bench/run.sh NAME [ARGS] is .venv/bin/python bench/run.py
# NAME [ARGS] (bench/run.sh --list lists them). Options without a name (bench/run.sh --start ...) go to
# the heartbeats-and-fetches benchmark, `phases`, as they always did.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

python=.venv/bin/python
if [[ ! -x "$python" ]]; then
    echo "run.sh: .venv not found: run 'make install' first" >&2
    exit 1
fi
case "${1:-}" in
    -h | --help | --list | "") ;;
    -*) set -- phases "$@" ;;
esac
exec "$python" bench/run.py "$@"
