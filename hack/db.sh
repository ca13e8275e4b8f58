#!/usr/bin/env bash
# PostgreSQL and MariaDB for the SQL tests and for people (docs/design-sql.md,
# decision 8): Debian's servers run as plain processes, no system service, in
# a directory of their own, on free ports of 127.0.0.1, each with a database
# `elasticdl` and a user `elasticdl` whose password is made once and kept.
#   hack/db.sh up   [DIR]  start them (or find them running), print the URLs
#   hack/db.sh env  [DIR]  print the URLs of the running servers
#   hack/db.sh down [DIR]  stop them (the data stays: the next up is quick)
# Prints, for eval:
#   export ELASTICDL_TEST_POSTGRES='postgres://elasticdl:PW@127.0.0.1:PORT/elasticdl'
#   export ELASTICDL_TEST_MYSQL='mysql://elasticdl:PW@tcp(127.0.0.1:PORT)/elasticdl'
# DIR defaults to ~/.cache/elasticdl-db. As root the servers run as Debian's
# `postgres` and `mysql` users (PostgreSQL refuses root), which cannot enter
# root's home, so root's default is /var/tmp/elasticdl-db. As root it installs
# postgresql and mariadb-server when missing.
set -euo pipefail
cmd="${1:-}"
case "$cmd" in up | down | env) ;; *) echo "usage: $0 up|down|env [DIR]" >&2; exit 2 ;; esac
root=false
[ "$(id -u)" -eq 0 ] && root=true
if [ -n "${2:-}" ]; then
  dir="$2"
elif $root; then
  dir=/var/tmp/elasticdl-db
else
  dir="${XDG_CACHE_HOME:-$HOME/.cache}/elasticdl-db"
fi
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
say() { echo "db.sh: $*" >&2; }
die() { say "$*"; exit 1; }

# install puts the Debian packages in place when a server is missing.
install() {
  local need=()
  pg_bin >/dev/null 2>&1 || need+=(postgresql)
  command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
  [ ${#need[@]} -eq 0 ] && return 0
  if $root && command -v apt-get >/dev/null; then
    say "installing ${need[*]} ..."
    apt-get update -qq >&2
    # The packages' own services stay off where no init runs (containers);
    # elsewhere they may start on their default ports: ours use others.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
  else
    die "missing Debian packages: sudo apt-get update && sudo apt-get install --no-install-recommends ${need[*]}"
  fi
}
pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 | grep .; }
PATH="$PATH:/usr/sbin"

# as USER CMD... runs CMD as the server's user: USER when root, else the caller.
as() {
  local u="$1"; shift
  if $root; then runuser -u "$u" -- "$@"; else "$@"; fi
}
# owned DIR USER makes DIR, owned by the server's user.
owned() {
  mkdir -p "$1"
  if $root; then chown "$2:" "$1"; fi
}
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# wait_for WHAT CMD... polls CMD until it succeeds (30 s at most).
wait_for() {
  local what="$1"; shift
  local deadline=$((SECONDS + 30))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.1
  done
}

pg_user=postgres my_user=mysql
$root || { pg_user="$(id -un)"; my_user="$pg_user"; }
pg="$dir/pg" my="$dir/my"

password() {
  [ -s "$dir/password" ] || (umask 077 && od -An -N12 -tx1 /dev/urandom | tr -d ' \n' >"$dir/password")
  cat "$dir/password"
}

pg_running() { [ -s "$pg/port" ] && "$(pg_bin)/pg_isready" -q -h 127.0.0.1 -p "$(cat "$pg/port")" -t 1; }
pg_up() {
  local bin; bin="$(pg_bin)"
  if [ ! -s "$pg/data/PG_VERSION" ]; then
    owned "$pg" "$pg_user"
    rm -rf "$pg/data"
    local pw="$pg/pwfile"
    (umask 077 && password >"$pw")
    $root && chown "$pg_user:" "$pw"
    say "initdb $pg/data"
    as "$pg_user" "$bin/initdb" -D "$pg/data" -U elasticdl --pwfile="$pw" -E UTF8 --locale=C.UTF-8 \
      --auth-local=trust --auth-host=scram-sha-256 >"$pg/initdb.log" 2>&1 || { cat "$pg/initdb.log" >&2; die "initdb failed"; }
    rm -f "$pw"
  fi
  pg_running && return 0
  local try
  for try in 1 2 3; do # another program may take the free port first
    local port; port="$(free_port)"
    # Test settings: durability off, for speed.
    if as "$pg_user" "$bin/pg_ctl" -D "$pg/data" -l "$pg/log" -w -t 30 start \
      -o "-p $port -k $pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
      >/dev/null 9>&-; then
      echo "$port" >"$pg/port"
      break
    fi
    [ $try -lt 3 ] || { tail -20 "$pg/log" >&2; die "PostgreSQL did not start (log: $pg/log)"; }
  done
  wait_for postgres "$bin/pg_isready" -q -h 127.0.0.1 -p "$(cat "$pg/port")" || die "PostgreSQL does not accept connections (log: $pg/log)"
  if ! as "$pg_user" "$bin/psql" -h "$pg" -p "$(cat "$pg/port")" -U elasticdl -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = 'elasticdl'" | grep -q 1; then
    as "$pg_user" "$bin/createdb" -h "$pg" -p "$(cat "$pg/port")" -U elasticdl elasticdl
  fi
}
pg_down() {
  [ -s "$pg/data/PG_VERSION" ] || return 0
  as "$pg_user" "$(pg_bin)/pg_ctl" -D "$pg/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
}

# my_client runs the mariadb client as the server's OS user, who logs in
# over the socket by unix_socket authentication (mariadb-install-db made it).
my_client() { as "$my_user" mariadb --no-defaults --socket="$my/sock" -u "$my_user" "$@"; }
my_running() { [ -s "$my/port" ] && [ -S "$my/sock" ] && my_client -e 'SELECT 1' >/dev/null 2>&1; }
my_up() {
  if [ ! -d "$my/data/mysql" ]; then
    owned "$my" "$my_user"
    rm -rf "$my/data"
    say "mariadb-install-db $my/data"
    as "$my_user" mariadb-install-db --no-defaults --datadir="$my/data" --auth-root-authentication-method=socket \
      --skip-test-db >"$my/install.log" 2>&1 || { cat "$my/install.log" >&2; die "mariadb-install-db failed"; }
  fi
  my_running && return 0
  local try
  for try in 1 2 3; do
    local port; port="$(free_port)"
    # Its own session, so that it outlives this script; durability off, for
    # speed. As root, mariadbd drops to --user itself.
    setsid mariadbd --no-defaults --user="$my_user" --datadir="$my/data" --socket="$my/sock" --pid-file="$my/pid" \
      --port="$port" --bind-address=127.0.0.1 --skip-name-resolve --character-set-server=utf8mb4 --log-error="$my/log" --skip-log-bin \
      --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 --innodb-buffer-pool-size=64M \
      </dev/null >/dev/null 2>&1 9>&- &
    local pid=$!
    local deadline=$((SECONDS + 30))
    while ! my_running_on "$port"; do
      if ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -ge $deadline ]; then break; fi
      sleep 0.1
    done
    if my_running_on "$port"; then echo "$port" >"$my/port"; break; fi
    [ $try -lt 3 ] || { tail -20 "$my/log" >&2; die "MariaDB did not start (log: $my/log)"; }
  done
  local pw; pw="$(password)"
  my_client -e "CREATE DATABASE IF NOT EXISTS elasticdl;
    ALTER DATABASE elasticdl CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
    CREATE USER IF NOT EXISTS 'elasticdl'@'%' IDENTIFIED BY '$pw';
    GRANT ALL PRIVILEGES ON *.* TO 'elasticdl'@'%';"
}
my_running_on() { my_client -e "SELECT @@port" 2>/dev/null | grep -qx "$1"; }
my_down() {
  [ -s "$my/pid" ] || return 0
  local pid; pid="$(cat "$my/pid")"
  kill "$pid" 2>/dev/null || return 0
  local deadline=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || die "MariaDB (pid $pid) did not stop"
    sleep 0.1
  done
}

urls() {
  pg_running || die "PostgreSQL is not running in $dir: hack/db.sh up"
  my_running || die "MariaDB is not running in $dir: hack/db.sh up"
  local pw; pw="$(password)"
  echo "export ELASTICDL_TEST_POSTGRES='postgres://elasticdl:$pw@127.0.0.1:$(cat "$pg/port")/elasticdl'"
  echo "export ELASTICDL_TEST_MYSQL='mysql://elasticdl:$pw@tcp(127.0.0.1:$(cat "$my/port"))/elasticdl'"
}

# One db.sh at a time per directory: two ups would init one data dir twice.
exec 9>"$dir/lock"
flock 9
case "$cmd" in
  up)
    install
    if $root; then
      id -u "$pg_user" >/dev/null 2>&1 || die "no user $pg_user (Debian's postgresql package makes it)"
      id -u "$my_user" >/dev/null 2>&1 || die "no user $my_user (Debian's mariadb-server package makes it)"
      runuser -u "$pg_user" -- test -x "$dir" || die "$dir: user $pg_user cannot enter it: give a DIR it can"
    fi
    pg_up
    my_up
    urls
    ;;
  env) urls ;;
  down)
    pg_down
    my_down
    say "stopped (data kept in $dir)"
    ;;
esac
