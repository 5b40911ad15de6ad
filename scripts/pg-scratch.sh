#!/usr/bin/env bash
# Start or stop a throw-away PostgreSQL cluster for the test suite.
#   pg-scratch.sh start   -> prints a SQLAlchemy URL (postgresql+asyncpg://...) on stdout
#   pg-scratch.sh stop
# The cluster lives in .pgdata/ of the repository; it listens on loopback only.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${AGENTRT_PG_PORT:-54329}"
DATA="$ROOT/.pgdata"
# As root the cluster runs as the 'postgres' user, which must be able to reach its data
# directory: a checkout under a private directory (mktemp -d is mode 700) is out of its reach,
# so the cluster then lives in a directory of its own under the system's temporary directory.
if [[ "$(id -u)" == 0 ]] && ! runuser -u postgres -- test -x "$ROOT" 2>/dev/null; then
  DATA="${TMPDIR:-/tmp}/agentrt-pgdata-$PORT"
fi

find_bin() {
  local dir
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(readlink -f "$(command -v pg_ctl)")"
    return 0
  fi
  for dir in /usr/lib/postgresql/*/bin; do
    [[ -x "$dir/pg_ctl" ]] && { echo "$dir"; return 0; }
  done
  return 1
}

as_owner() {
  # PostgreSQL refuses to run as root: run it as the 'postgres' system user then.
  if [[ "$(id -u)" == 0 ]]; then
    (cd / && runuser -u postgres -- "$@")
  else
    "$@"
  fi
}

case "${1:-}" in
  start)
    BIN="$(find_bin)" || { echo "PostgreSQL is not installed" >&2; exit 1; }
    if [[ -f "$DATA/postmaster.pid" ]] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
      :
    else
      rm -rf "$DATA"
      mkdir -p "$DATA"
      [[ "$(id -u)" == 0 ]] && chown postgres "$DATA"
      as_owner "$BIN/initdb" -D "$DATA" -U agentrt --auth=trust >/dev/null
      as_owner "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w \
        -o "-c listen_addresses=127.0.0.1 -c port=$PORT -c unix_socket_directories=$DATA -c fsync=on" \
        start >/dev/null
    fi
    as_owner "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U agentrt -d postgres -tAc \
      "SELECT 1 FROM pg_database WHERE datname='agentrt_test'" | grep -q 1 ||
      as_owner "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U agentrt agentrt_test
    echo "postgresql+asyncpg://agentrt@127.0.0.1:$PORT/agentrt_test"
    ;;
  stop)
    BIN="$(find_bin)" || exit 0
    [[ -d "$DATA" ]] && as_owner "$BIN/pg_ctl" -D "$DATA" -m fast stop >/dev/null 2>&1 || true
    rm -rf "$DATA"
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
