#!/usr/bin/env bash
# `make stack`: one node in production mode on this machine, in the foreground, without Docker.
#
# The same processes as deploy/docker-compose.yml and deploy/systemd/: Redis (started here if none
# answers at REDIS_URL), migrations, the registry process (gunicorn -c deploy/gunicorn.conf.py), a
# Celery worker and Celery beat. Each process's output is prefixed with its name. Ctrl-C (or TERM)
# stops them all, the Redis started here included; if one dies on its own, the others are stopped
# and the script exits non-zero.
#
# Settings: the environment, then deploy/.env if it exists (EUREKA_ENV_FILE to use another file;
# variables already set win), then these defaults: REDIS_URL=redis://127.0.0.1:6379/0, a
# EUREKA_CONTROL_SECRET generated for this run, a SECRET_KEY kept in var/stack-secret-key.
# PORT (default 8761) is the registry's port (another port: files in var/node-PORT unless
# EUREKA_DATA_DIR is set); EUREKA_CONTROL_URL is http://127.0.0.1:$PORT unless
# set in the environment (not from the file). EUREKA_EMBEDDED is always false: production mode is the
# point of the stack.
#
# Readers (registry/reader/): STACK_READERS=N (`make stack READERS=N`) also starts a reader, gunicorn
# with deploy/gunicorn_reader.conf.py and N worker processes, on READER_PORT (default PORT + 19: 8780).
# It serves GET /eureka/apps, apps/delta, apps/{app}, vips and svips from this node's Redis cache and
# forwards everything else to the node. Default 0: no reader.
#
# The mesh process (manage.py mesh, docs/mesh.md): STACK_MESH=1 (`make stack MESH=1`) also starts it,
# once the node is ready, following this node at http://127.0.0.1:PORT (EUREKA_MESH_NODE_URL unless set) and serving xDS on
# EUREKA_XDS_PORT (default PORT + 10000: 18761) and DNS, UDP and TCP on loopback, on EUREKA_DNS_PORT
# (default PORT - 161: 8600, the port the chart and Compose use; PORT + 1 would be a second node's).
# Either set to 0 turns that part off. Default 0: no mesh process.
# shellcheck disable=SC2317  # cleanup, on_signal and stop_pids run from traps
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

BIN=.venv/bin
ENV_FILE=${EUREKA_ENV_FILE:-deploy/.env}
STOP_TIMEOUT=${STACK_STOP_TIMEOUT:-30}
PORT=${PORT:-8761}
READERS=${STACK_READERS:-0}
READER_PORT=${READER_PORT:-$((PORT + 19))}
MESH=${STACK_MESH:-0}

names=()
pids=()
redis_pid=""
stop_requested=""
cleaned_up=""

log() {
    printf '%-13s | %s\n' stack "$*"
}

die() {
    log "error: $*" >&2
    exit 1
}

# Reads standard input and writes it with "name |" in front of each line. It ignores INT/TERM/HUP so
# that it keeps printing while the process it follows shuts down; it ends when that process does.
prefix_output() {
    trap '' INT TERM HUP
    local prefix line
    prefix=$(printf '%-13s |' "$1")
    while IFS= read -r line || [[ -n $line ]]; do
        printf '%s %s\n' "$prefix" "$line"
    done
}

# start NAME COMMAND...: runs COMMAND in the background, in its own process group (so that Ctrl-C
# reaches this script only, which stops the processes in order), and records its pid.
start() {
    local name=$1
    shift
    set -m
    "$@" </dev/null > >(prefix_output "$name") 2>&1 &
    local pid=$!
    set +m
    local shown=("$@") i
    for ((i = 1; i < ${#shown[@]}; i++)); do
        if [[ ${shown[i - 1]} == --requirepass ]]; then shown[i]="***"; fi
    done
    log "started $name (pid $pid): ${shown[*]}"
    if [[ $name == redis ]]; then
        redis_pid=$pid
    else
        names+=("$name")
        pids+=("$pid")
    fi
}

alive() {
    kill -0 "$1" 2>/dev/null
}

# stop_pids TIMEOUT PID...: TERM, then up to TIMEOUT seconds, then KILL for the whole process group.
stop_pids() {
    local timeout=$1 pid deadline
    shift
    for pid in "$@"; do
        if alive "$pid"; then kill -TERM "$pid" 2>/dev/null || true; fi
    done
    deadline=$((SECONDS + timeout))
    for pid in "$@"; do
        while alive "$pid" && ((SECONDS < deadline)); do sleep 0.2; done
        if alive "$pid"; then
            log "pid $pid still running after ${timeout}s: killing it"
            kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
    done
}

cleanup() {
    [[ -z $cleaned_up ]] || return 0
    cleaned_up=1
    ((${#pids[@]})) || [[ -n $redis_pid ]] || return 0
    local i running=()
    # The application processes first (in reverse start order), then the Redis they use.
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        if alive "${pids[i]}"; then
            log "stopping ${names[i]}"
            running+=("${pids[i]}")
        else
            # Its children (gunicorn's worker, Celery's pool) may have outlived it: same process group.
            kill -TERM -- "-${pids[i]}" 2>/dev/null || true
        fi
    done
    if ((${#running[@]})); then stop_pids "$STOP_TIMEOUT" "${running[@]}"; fi
    if [[ -n $redis_pid ]] && alive "$redis_pid"; then
        log "stopping redis"
        stop_pids 10 "$redis_pid"
    fi
    log "stopped"
}

on_signal() {
    if [[ -z $stop_requested ]]; then log "got SIG$1: stopping everything"; fi
    stop_requested=1
}

# load_env_file FILE: KEY=VALUE lines (comments, blank lines and an `export ` prefix allowed; one pair
# of surrounding quotes is removed). Variables already in the environment are left alone.
load_env_file() {
    local file=$1 line key value
    [[ -f $file ]] || return 0
    log "reading $file"
    while IFS= read -r line || [[ -n $line ]]; do
        line=${line%$'\r'}
        [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
        line=${line#export }
        if [[ ! $line =~ ^[[:space:]]*([A-Za-z_][A-Za-z0-9_]*)[[:space:]]*=[[:space:]]*(.*)$ ]]; then
            log "ignoring a malformed line of $file: $line"
            continue
        fi
        key=${BASH_REMATCH[1]}
        value=${BASH_REMATCH[2]}
        if [[ $value =~ ^\"(.*)\"$ || $value =~ ^\'(.*)\'$ ]]; then value=${BASH_REMATCH[1]}; fi
        if [[ ! -v $key ]]; then export "$key=$value"; fi
    done <"$file"
}

# redis_url_parts URL: prints "host port password redacted-url" (password "-" if none), or fails.
redis_url_parts() {
    "$BIN/python" - "$1" <<'PY'
import sys
from urllib.parse import urlsplit

url = urlsplit(sys.argv[1])
if url.scheme != "redis":
    sys.exit(f"only redis:// URLs can be checked and started here, not {url.scheme}://")
host, port, password = url.hostname or "127.0.0.1", url.port or 6379, url.password
netloc = f"{host}:{port}" if not password else f"{url.username or ''}:***@{host}:{port}"
print(host, port, password or "-", url._replace(netloc=netloc).geturl())
PY
}

redis_answers() {
    "$BIN/python" - "$1" <<'PY' 2>/dev/null
import sys

import redis

redis.Redis.from_url(sys.argv[1], socket_connect_timeout=1, socket_timeout=1).ping()
PY
}

# ready_status URL: prints the HTTP status of GET URL (000 if there is no answer).
ready_status() {
    "$BIN/python" - "$1" <<'PY' 2>/dev/null || echo 000
import sys
import urllib.error
import urllib.request

try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as response:
        print(response.status)
except urllib.error.HTTPError as exc:
    print(exc.code)
except OSError:
    print("000")
PY
}

ensure_redis() {
    local parts host port password shown
    parts=$(redis_url_parts "$REDIS_URL") || die "REDIS_URL: cannot use $REDIS_URL"
    read -r host port password shown <<<"$parts"
    if redis_answers "$REDIS_URL"; then
        log "Redis answers at $shown: using it"
        return 0
    fi
    case $host in
        localhost) host=127.0.0.1 ;;
        127.0.0.1 | ::1) ;;
        *) die "no Redis answers at $shown (start it, or unset REDIS_URL to get one started on this machine)" ;;
    esac
    command -v redis-server >/dev/null 2>&1 ||
        die "no Redis answers at $shown and redis-server is not installed: install it (Debian/Ubuntu: sudo apt-get install redis-server; macOS: brew install redis) or point REDIS_URL at a running Redis"
    mkdir -p var/redis
    local args=(redis-server --bind "$host" --port "$port" --dir var/redis --daemonize no)
    if [[ $password != - ]]; then args+=(--requirepass "$password"); fi
    start redis "${args[@]}"
    local i
    for ((i = 0; i < 50; i++)); do
        [[ -z $stop_requested ]] || exit 0
        alive "$redis_pid" || die "redis-server exited at start-up (see its output above)"
        if redis_answers "$REDIS_URL"; then
            log "Redis is up at $shown (data in var/redis)"
            return 0
        fi
        sleep 0.2
    done
    die "redis-server started but does not answer at $shown"
}

[[ -x $BIN/python ]] || die "no $BIN/python: run 'make install' first (or use 'make stack')"
[[ $READERS =~ ^[0-9]+$ ]] || die "STACK_READERS (make stack READERS=N) must be a number of reader workers, got '$READERS'"
[[ $MESH == 0 || $MESH == 1 ]] || die "STACK_MESH (make stack MESH=1) must be 0 or 1, got '$MESH'"
[[ $PORT =~ ^[0-9]+$ ]] && ((PORT >= 1 && PORT <= 65535)) || die "PORT must be a TCP port, got '$PORT'"
mkdir -p var

trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
trap 'on_signal HUP' HUP
trap cleanup EXIT

# The registry listens on PORT here, so the worker reaches it there (unless told otherwise by the caller).
caller_control_url=${EUREKA_CONTROL_URL:-}
load_env_file "$ENV_FILE"

export EUREKA_EMBEDDED=false PYTHONUNBUFFERED=1
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
# A second node on this machine (another PORT) keeps its database and beat schedule apart; give it
# its own Redis database too (REDIS_URL=redis://127.0.0.1:6379/1). docs/clusters.md.
if [[ -z ${EUREKA_DATA_DIR:-} && $PORT != 8761 ]]; then
    export EUREKA_DATA_DIR=var/node-$PORT
fi
DATA_DIR=${EUREKA_DATA_DIR:-var}
mkdir -p "$DATA_DIR"
export EUREKA_CONTROL_URL=${caller_control_url:-http://127.0.0.1:$PORT}
if [[ -z ${EUREKA_CONTROL_SECRET:-} && -z ${EUREKA_CONTROL_SECRET_FILE:-} ]]; then
    EUREKA_CONTROL_SECRET=$("$BIN/python" -c 'import secrets; print(secrets.token_urlsafe(32))')
    export EUREKA_CONTROL_SECRET
    log "EUREKA_CONTROL_SECRET: generated for this run"
fi
if [[ -z ${SECRET_KEY:-} && -z ${SECRET_KEY_FILE:-} ]]; then
    if [[ ! -s var/stack-secret-key ]]; then
        (umask 077 && "$BIN/python" -c 'import secrets; print(secrets.token_urlsafe(50))' >var/stack-secret-key)
    fi
    SECRET_KEY=$(<var/stack-secret-key)
    export SECRET_KEY
    log "SECRET_KEY: the local one in var/stack-secret-key"
fi

if ((MESH)); then
    # Checked before anything starts: the mesh process would only fail once the rest is up.
    export EUREKA_XDS_PORT=${EUREKA_XDS_PORT:-$((PORT + 10000))}
    export EUREKA_DNS_PORT=${EUREKA_DNS_PORT:-$((PORT - 161))}
    export EUREKA_MESH_NODE_URL=${EUREKA_MESH_NODE_URL:-http://127.0.0.1:$PORT}
    for name in EUREKA_XDS_PORT EUREKA_DNS_PORT; do
        value=${!name}
        [[ $value =~ ^[0-9]+$ ]] && ((value <= 65535)) || die "$name must be a port (or 0: off), got '$value'"
        if ((value == PORT)) || { ((READERS > 0)) && ((value == READER_PORT)); }; then
            die "$name=$value is the registry's or the reader's port: set another one"
        fi
    done
    ((EUREKA_XDS_PORT || EUREKA_DNS_PORT)) || die "STACK_MESH=1 with EUREKA_XDS_PORT=0 and EUREKA_DNS_PORT=0: nothing to serve"
    ((EUREKA_XDS_PORT != EUREKA_DNS_PORT)) || die "EUREKA_XDS_PORT and EUREKA_DNS_PORT must differ (DNS listens on TCP too)"
    log "mesh: xDS on port $EUREKA_XDS_PORT, DNS on port $EUREKA_DNS_PORT (0: off), following $EUREKA_MESH_NODE_URL"
fi

ensure_redis
[[ -z $stop_requested ]] || exit 0

log "migrating the database"
"$BIN/python" manage.py migrate --noinput 2>&1 | prefix_output migrate
[[ -z $stop_requested ]] || exit 0

start registry "$BIN/gunicorn" -c deploy/gunicorn.conf.py --bind "0.0.0.0:$PORT"
start celery-worker "$BIN/celery" -A eureka_site worker --loglevel=INFO --concurrency=2
start celery-beat "$BIN/celery" -A eureka_site beat --loglevel=INFO --schedule="$DATA_DIR/celerybeat-schedule"
if ((READERS > 0)); then
    # The reader forwards what it does not serve to this node (EUREKA_READER_NODE_URL unless set).
    export EUREKA_READER_NODE_URL=${EUREKA_READER_NODE_URL:-http://127.0.0.1:$PORT}
    start reader "$BIN/gunicorn" -c deploy/gunicorn_reader.conf.py --bind "0.0.0.0:$READER_PORT" --workers "$READERS"
fi

ready_url="http://127.0.0.1:$PORT/readyz"
ready=""
reader_ready=""
((READERS > 0)) || reader_ready=skip
# The mesh process starts once the node is ready (or has had its 60 s): it follows the node from its
# first request on, rather than logging that the node is not there yet.
mesh_ready=""
mesh_deadline=""
((MESH)) || mesh_ready=skip
ready_deadline=$((SECONDS + 60))
failed=""
while [[ -z $stop_requested ]]; do
    for i in "${!pids[@]}"; do
        if ! alive "${pids[i]}"; then
            status=0
            wait "${pids[i]}" || status=$?
            failed="${names[i]} exited on its own (status $status)"
            break 2
        fi
    done
    if [[ -n $redis_pid ]] && ! alive "$redis_pid"; then
        failed="redis exited on its own"
        break
    fi
    if [[ -z $ready ]]; then
        code=$(ready_status "$ready_url")
        if [[ $code == 200 ]]; then
            ready=1
            log "open for traffic: http://127.0.0.1:$PORT/ (clients: http://127.0.0.1:$PORT/eureka/). Ctrl-C stops."
        elif ((SECONDS > ready_deadline)); then
            ready=timeout
            log "not ready after 60s: GET $ready_url answers $code (the processes keep running)"
        fi
    fi
    if [[ -z $reader_ready ]]; then
        # The reader's /readyz answers 200 once it reaches Redis.
        code=$(ready_status "http://127.0.0.1:$READER_PORT/readyz")
        if [[ $code == 200 ]]; then
            reader_ready=1
            log "readers: $READERS worker(s) at http://127.0.0.1:$READER_PORT/eureka/ (GET apps, apps/delta, apps/{app}, vips, svips from Redis; the rest forwarded to the node)"
        elif ((SECONDS > ready_deadline)); then
            reader_ready=timeout
            log "reader not ready after 60s: GET http://127.0.0.1:$READER_PORT/readyz answers $code (the processes keep running)"
        fi
    fi
    if [[ -z $mesh_ready && -n $ready && -z $mesh_deadline ]]; then
        start mesh "$BIN/python" manage.py mesh
        mesh_deadline=$((SECONDS + 60))
    fi
    if [[ -z $mesh_ready && -n $mesh_deadline ]]; then
        # Listening = each port that is on accepts a TCP connection (DNS answers over TCP too).
        listening=1
        for port in "$EUREKA_XDS_PORT" "$EUREKA_DNS_PORT"; do
            if ((port)) && ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then listening=""; fi
        done
        if [[ -n $listening ]]; then
            mesh_ready=1
            if ((EUREKA_XDS_PORT)); then
                log "mesh: xDS (ADS, gRPC) at 127.0.0.1:$EUREKA_XDS_PORT (the server_uri of an Envoy or gRPC bootstrap)"
            fi
            if ((EUREKA_DNS_PORT)); then
                log "mesh: DNS at 127.0.0.1:$EUREKA_DNS_PORT, UDP and TCP (dig @127.0.0.1 -p $EUREKA_DNS_PORT NAME.service.${EUREKA_DNS_DOMAIN:-eureka})"
            fi
        elif ((SECONDS > mesh_deadline)); then
            mesh_ready=timeout
            log "mesh not listening after 60s on its ports (the processes keep running)"
        fi
    fi
    sleep 1 &
    wait $! || true
done

if [[ -n $failed ]]; then
    log "error: $failed; stopping the others" >&2
    exit 1
fi
exit 0
