#!/usr/bin/env bash
# Runs a command with a private, throw-away PostgreSQL server, for the tests of the PostgreSQL store.
#
#   scripts/with-postgres.sh CMD [ARGS...]
#   scripts/with-postgres.sh bash -c 'psql "$SIGNOFF_TEST_POSTGRES_URL" -c "select 1"'
#
# A new cluster in a fresh temporary directory (initdb -A trust, superuser `signoff`, UTF8), listening on
# 127.0.0.1 on a free port, its unix socket in the temporary directory, fsync on (the store's durability
# claims are tested against it), max_connections = 200, the server log in the temporary directory. It is
# never the system's cluster. CMD runs with:
#
#   SIGNOFF_TEST_POSTGRES_URL    postgres://signoff@127.0.0.1:PORT/signoff (database `signoff` exists)
#   SIGNOFF_TEST_POSTGRES_DATA   the cluster's data directory
#   SIGNOFF_TEST_POSTGRES_CTL    a command prefix: pg_ctl, run as the cluster's owner, with -D (data
#                                directory) and -l (server log) given. Append a pg_ctl command:
#                                  $SIGNOFF_TEST_POSTGRES_CTL restart -w -m fast
#                                  $SIGNOFF_TEST_POSTGRES_CTL stop -w -m immediate
#                                  $SIGNOFF_TEST_POSTGRES_CTL start -w
#                                Split it on spaces, unquoted (no part contains a space), e.g. in Rust:
#                                  let mut w = ctl.split_whitespace();
#                                  Command::new(w.next().unwrap()).args(w).args(["restart", "-w", "-m", "fast"])
#                                The server keeps its port and settings across restarts.
#   SIGNOFF_REQUIRE_POSTGRES=1   tests must not skip their PostgreSQL cases.
#
# When SIGNOFF_TEST_POSTGRES_URL is already set, CMD just runs (nested use, e.g. `make test` wrapping
# `make test-rust`). PostgreSQL's server binaries are found in /usr/lib/postgresql/*/bin (newest), then
# `pg_config --bindir`, then PATH; when there are none and we are root on a system with apt-get, Debian's
# `postgresql` package is installed (without creating or starting a system cluster). initdb refuses to run
# as root: as root, the cluster belongs to the `postgres` user (created if missing) and every server
# command runs through runuser (or setpriv).
#
# The server is stopped (pg_ctl stop -m immediate) and the directory removed when CMD ends, fails or is
# interrupted; the exit status is CMD's. On failure the last 30 lines of the server log are printed.
set -euo pipefail

if [ $# -eq 0 ]; then
  echo "usage: $0 CMD [ARGS...]   (runs CMD with a private PostgreSQL server; see the header)" >&2
  exit 2
fi

if [ -n "${SIGNOFF_TEST_POSTGRES_URL:-}" ]; then
  exec "$@"
fi

say() { echo "with-postgres: $*" >&2; }

# The directory holding initdb and pg_ctl, or nothing.
find_bindir() {
  local d best=""
  # Newest version first (version-sorted, descending).
  while IFS= read -r d; do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
      best=$d
      break
    fi
  done < <(compgen -G '/usr/lib/postgresql/*/bin' | sort -rV)
  if [ -z "$best" ] && command -v pg_config >/dev/null; then
    d=$(pg_config --bindir 2>/dev/null || true)
    if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then best=$d; fi
  fi
  if [ -z "$best" ] && command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
    best=$(dirname "$(command -v initdb)")
  fi
  printf '%s' "$best"
}

is_root() { [ "$(id -u)" -eq 0 ]; }

install_postgresql() {
  say "PostgreSQL's server is not installed; installing Debian's postgresql package"
  export DEBIAN_FRONTEND=noninteractive
  # The package would create and start a `main` cluster on port 5432; we never use one.
  mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.d/signoff-no-main-cluster.conf
  apt-get update -q >/dev/null
  apt-get install -y -q postgresql >/dev/null
  # Older postgresql-common ignores createcluster.d: stop whatever the installation started.
  if command -v pg_lsclusters >/dev/null; then
    local ver name _
    while read -r ver name _; do
      pg_ctlcluster "$ver" "$name" stop >/dev/null 2>&1 || true
    done < <(pg_lsclusters -h 2>/dev/null || true)
  fi
}

bindir=$(find_bindir)
if [ -z "$bindir" ] && command -v apt-get >/dev/null && is_root; then
  install_postgresql
  bindir=$(find_bindir)
fi
if [ -z "$bindir" ]; then
  say "no PostgreSQL server found (looked for /usr/lib/postgresql/*/bin/initdb, pg_config --bindir, initdb on PATH)."
  say "Install it (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql) or set"
  say "SIGNOFF_TEST_POSTGRES_URL to a server the tests may create schemas in."
  exit 1
fi

# As root: every server command runs as `postgres`, which owns the cluster (`owner CMD...`).
as_owner=()
if is_root; then
  if ! id -u postgres >/dev/null 2>&1; then
    useradd --system --user-group --no-create-home --shell /usr/sbin/nologin postgres
  fi
  if command -v runuser >/dev/null; then
    as_owner=(runuser -u postgres --)
  else
    as_owner=(setpriv --reuid=postgres --regid=postgres --init-groups)
  fi
fi
owner() {
  # (An empty array expands under `set -u` only from bash 4.4 on: macOS has 3.2.)
  if [ ${#as_owner[@]} -gt 0 ]; then "${as_owner[@]}" "$@"; else "$@"; fi
}

# A directory without spaces, so SIGNOFF_TEST_POSTGRES_CTL splits on them.
tmp_parent=${TMPDIR:-/tmp}
case $tmp_parent in *[[:space:]]*) tmp_parent=/tmp ;; esac
# As root, the cluster's owner must reach the directory: TMPDIR may be private to root.
if is_root && ! owner test -x "$tmp_parent" 2>/dev/null; then tmp_parent=/tmp; fi
tmp=$(mktemp -d "$tmp_parent/signoff-pg.XXXXXXXX")
data=$tmp/data
log=$tmp/server.log
sock=$tmp/run
if is_root; then chown postgres: "$tmp"; fi
chmod 700 "$tmp"

pg_ctl=(${as_owner[@]+"${as_owner[@]}"} "$bindir/pg_ctl" -D "$data" -l "$log")
status=1
started=false

# shellcheck disable=SC2329 # (called by cleanup)
print_log() {
  if [ -f "$log" ]; then
    say "the last 30 lines of the server log ($log):"
    tail -n 30 "$log" >&2 || true
  fi
}

# shellcheck disable=SC2329 # (called by the EXIT trap)
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ "$status" -ne 0 ] || status=$rc
  if [ "$status" -ne 0 ]; then print_log; fi
  if $started || [ -f "$data/postmaster.pid" ]; then
    "${pg_ctl[@]}" stop -m immediate -w -s >/dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'status=130; exit 130' INT
trap 'status=143; exit 143' TERM

owner mkdir -p "$sock"
owner "$bindir/initdb" -D "$data" -A trust -U signoff --no-sync -E UTF8 --locale=C >"$tmp/initdb.log" 2>&1 || {
  cat "$tmp/initdb.log" >&2
  say "initdb failed"
  exit 1
}
echo "include = 'signoff.conf'" | owner tee -a "$data/postgresql.conf" >/dev/null

free_port() {
  if command -v python3 >/dev/null; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
    return
  fi
  local p
  while :; do
    p=$((20000 + RANDOM % 40000))
    # Nothing answers on it.
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
}

# Another process may take the port between the check and the start: try a few.
for attempt in 1 2 3 4 5; do
  port=$(free_port)
  # Settings live in the data directory, so a restart through SIGNOFF_TEST_POSTGRES_CTL keeps them.
  owner tee "$data/signoff.conf" >/dev/null <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$sock'
max_connections = 200
fsync = on
logging_collector = off
EOF
  if "${pg_ctl[@]}" start -w -t 60 -s >/dev/null 2>&1; then
    started=true
    break
  fi
  if grep -q "could not bind\|already in use" "$log" 2>/dev/null && [ "$attempt" -lt 5 ]; then
    say "port $port was taken; trying another"
    continue
  fi
  say "the server did not start"
  exit 1
done

"$bindir/createdb" -h 127.0.0.1 -p "$port" -U signoff signoff

export SIGNOFF_TEST_POSTGRES_URL="postgres://signoff@127.0.0.1:$port/signoff"
export SIGNOFF_TEST_POSTGRES_DATA="$data"
export SIGNOFF_TEST_POSTGRES_CTL="${pg_ctl[*]}"
export SIGNOFF_REQUIRE_POSTGRES=1
say "PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') at $SIGNOFF_TEST_POSTGRES_URL (data: $data)"

set +e
"$@"
status=$?
set -e
exit "$status"
