#!/usr/bin/env bash
# scripts/setup.sh [demo|test]: the one set-up step of this repository.
# `make demo` runs it for group demo, `make test` and .ci/run for group test.
# It installs what is missing on Debian and nothing else: every item is
# detected first (command -v and dpkg-query for packages, pg_lsclusters and
# pg_isready for the cluster, psql for the role and database), so a second run
# installs nothing, takes about a second and prints one line.
#
#   demo  redis-server; ca-certificates (Go fetches modules over HTTPS);
#         nodejs and npm, and `npm ci` in inventory/foreign/node-redlock: the
#         drills run the node-redlock guard beside every fault of the Redis
#         nodes, and the quick start runs a drill.
#   test  all of demo, and: make; gcc and libc6-dev (go test -race needs cgo);
#         postgresql, a running cluster with a role redlab (password redlab,
#         superuser) and a database redlab; chrony; cloud-init; prometheus (for
#         promtool, and the lab's monitoring) and prometheus-redis-exporter;
#         chromium and fonts-liberation (report screenshots);
#         systemd (systemd-analyze); debootstrap and systemd-container
#         (systemd-nspawn: infra/verify boots the node's user data in
#         Debian 12 machines); `npm ci` in each folder of npm_dirs (the
#         tests' npm fixtures, and the node-redlock adapter of the foreign
#         guards) that has a package.json and whose node_modules is missing
#         or stale; tofu or terraform, else OpenTofu
#         built into ./bin/tofu by `make tools` (about 10-14 min on 2 cores);
#         the etcd server and etcdctl built into ./bin by `make etcd` (about
#         1.5 min on 2 cores) when either is missing or reports another
#         version than tools/etcd/go.mod pins (Debian's etcd is end of life).
#         It writes the test database's URL, with the cluster's real port, to
#         bin/postgres-dsn; the Makefile exports it as REDLAB_TEST_POSTGRES.
#         The cluster is the first one online (REDLAB_PG_CLUSTER=15/main
#         picks another); with none at all, it creates VERSION/main.
#
# As root with apt-get it installs what is missing (apt-get update first, only
# then). As anyone else, or without apt-get, it prints the missing packages and
# the one command that installs them, and exits 1: a non-root user can still
# run `make test` once the packages are there. Run through sudo, it gives what
# it writes in the clone (bin/, node_modules) back to the invoking user.
#
# Exit status: 0 everything present (or now installed); 1 something is missing
# that this user cannot install, or a step failed (stderr says which); 2 usage.
set -Eeuo pipefail
cd "$(dirname "$0")/.."

usage="usage: scripts/setup.sh [demo|test]  (default test)"
group=${1:-test}
case $group in
demo | test) ;;
-h | --help)
	echo "$usage"
	exit 0
	;;
*)
	echo "setup: unknown group '$group'; $usage" >&2
	exit 2
	;;
esac
[ $# -le 1 ] || {
	echo "setup: one group at most; $usage" >&2
	exit 2
}

# Every failure says what was being done. Command substitutions inherit the
# trap (-E); only the top level reports, once.
step="starting"
on_err() {
	local rc=$?
	((BASH_SUBSHELL == 0)) || return 0
	echo "setup: failed while $step (exit status $rc)" >&2
	exit "$rc"
}
trap on_err ERR

die() {
	echo "setup: $*" >&2
	exit 1
}

# Non-root shells often lack the sbin directories (chronyd, pg tools live there).
PATH="$PATH:/usr/sbin:/sbin"
command -v go >/dev/null 2>&1 || [ ! -x /usr/local/go/bin/go ] || PATH="$PATH:/usr/local/go/bin"
export DEBIAN_FRONTEND=noninteractive

t0=$(date +%s%N)
did=()     # what this run changed, for the last line
written=() # paths this run created in the clone (chowned back under sudo)

is_root() { [ "$(id -u)" = 0 ]; }

# as_root_cmd CMD: CMD as a non-root user would type it to run it as root.
as_root_cmd() {
	if command -v sudo >/dev/null 2>&1; then
		echo "sudo $1"
	else
		echo "su -c '$1'"
	fi
}

# run_quiet CMD...: run CMD with its output kept aside; on failure show it (its
# start and end when long: npm says why first, apt-get last).
run_quiet() {
	local log rc=0
	log=$(mktemp -t redlab-setup.XXXXXX)
	"$@" >"$log" 2>&1 || rc=$?
	if ((rc != 0)); then
		echo "setup: $* failed (exit status $rc); its output:" >&2
		if (($(wc -l <"$log") > 50)); then
			head -n 15 "$log" >&2
			echo "[...]" >&2
			tail -n 30 "$log" >&2
		else
			cat "$log" >&2
		fi
	fi
	rm -f "$log"
	return "$rc"
}

# --- Debian packages -------------------------------------------------------

missing=()

# need_cmd PACKAGE COMMAND...: PACKAGE is missing unless one of the commands is
# on PATH (so a tofu, node or terraform installed another way counts).
need_cmd() {
	local pkg=$1 c
	shift
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 && return 0
	done
	missing+=("$pkg")
}

# need_deb PACKAGE FILE: PACKAGE is missing unless dpkg has it installed; on a
# machine without dpkg, unless FILE exists.
need_deb() {
	if command -v dpkg-query >/dev/null 2>&1; then
		[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null || true)" = "ii " ] && return 0
	else
		[ -e "$2" ] && return 0
	fi
	missing+=("$1")
}

detect() {
	missing=()
	need_deb ca-certificates /etc/ssl/certs/ca-certificates.crt
	need_cmd redis-server redis-server
	need_cmd nodejs node nodejs
	need_cmd npm npm
	[ "$group" = test ] || return 0
	need_cmd make make
	need_cmd gcc gcc
	need_deb libc6-dev /usr/include/stdlib.h
	# The server itself, not only the client: Debian's cluster tools and a
	# postgres binary.
	if ! command -v pg_lsclusters >/dev/null 2>&1 || ! compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; then
		missing+=(postgresql)
	fi
	need_cmd chrony chronyd
	need_cmd cloud-init cloud-init
	need_cmd prometheus promtool
	need_cmd prometheus-redis-exporter prometheus-redis-exporter
	need_cmd chromium chromium
	# A font, so that the report screenshots have text (chromium only
	# recommends one).
	need_deb fonts-liberation /usr/share/fonts/truetype/liberation
	need_cmd systemd systemd-analyze
	need_cmd debootstrap debootstrap
	need_cmd systemd-container systemd-nspawn
	# The kernel redirect of a lab's fronts while no fault is in force
	# (internal/redirect).
	need_cmd nftables nft
	need_cmd conntrack conntrack
	# sshd for the SSH transport's tests (infra/remote), which start their own.
	need_deb openssh-server /usr/sbin/sshd
}

step="looking for the packages of group $group"
detect
if ((${#missing[@]} > 0)); then
	if ! is_root; then
		die "missing for group $group: ${missing[*]}
setup: install them with: $(as_root_cmd "apt-get install -y ${missing[*]}")"
	fi
	command -v apt-get >/dev/null 2>&1 ||
		die "missing for group $group: ${missing[*]}
setup: there is no apt-get here: install these Debian packages, or your system's equivalents, then run this again"
	echo "setup: installing ${missing[*]}"
	step="apt-get update"
	run_quiet apt-get -o DPkg::Lock::Timeout=300 update -q
	step="apt-get install ${missing[*]}"
	run_quiet apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}"
	did+=("installed ${missing[*]}")
	step="looking for the packages again after installing them"
	detect
	((${#missing[@]} == 0)) || die "apt-get installed the packages, but these are still not found: ${missing[*]}"
fi

# --- PostgreSQL: a running cluster, role redlab, database redlab --------------

# as_postgres CMD...: CMD as the postgres user, from a directory it may read.
as_postgres() { (cd / && runuser -u postgres -- "$@"); }

# redlab_ok URL: the role logs in with its password over TCP, reaches its
# database and is a superuser (the store tests create schemas).
redlab_ok() {
	[ "$(PGCONNECT_TIMEOUT=5 psql -X -w -tA -d "$1" -c 'SELECT rolsuper FROM pg_roles WHERE rolname = current_user' 2>/dev/null || true)" = t ]
}

# The cluster: REDLAB_PG_CLUSTER (VERSION/NAME, as pg_lsclusters names it)
# when set, else the first one online, else the first one.
setup_postgres() {
	local line ver name port status rest dsn sql ready
	step="listing the PostgreSQL clusters (pg_lsclusters)"
	if [ -n "${REDLAB_PG_CLUSTER:-}" ]; then
		line=$(pg_lsclusters -h | awk -v want="$REDLAB_PG_CLUSTER" '$1 "/" $2 == want { print; exit }')
		[ -n "$line" ] || die "REDLAB_PG_CLUSTER=$REDLAB_PG_CLUSTER: no such cluster in pg_lsclusters"
	else
		line=$(pg_lsclusters -h | awk '$4 ~ /^online/ { print; exit }')
		[ -n "$line" ] || line=$(pg_lsclusters -h | head -n 1)
	fi
	if [ -z "$line" ]; then
		ver=$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -n | tail -n 1)
		is_root || die "there is no PostgreSQL cluster
setup: create one with: $(as_root_cmd "pg_createcluster $ver main --start")"
		step="creating the PostgreSQL cluster $ver/main"
		echo "setup: creating the PostgreSQL cluster $ver/main"
		run_quiet pg_createcluster "$ver" main
		did+=("created cluster $ver/main")
		line=$(pg_lsclusters -h | head -n 1)
	fi
	read -r ver name port status rest <<<"$line"
	if [[ $status != online* ]]; then
		is_root || die "the PostgreSQL cluster $ver/$name (port $port) is $status
setup: start it with: $(as_root_cmd "pg_ctlcluster $ver $name start")"
		step="starting the PostgreSQL cluster $ver/$name"
		echo "setup: starting the PostgreSQL cluster $ver/$name (port $port)"
		run_quiet pg_ctlcluster "$ver" "$name" start
		did+=("started cluster $ver/$name")
	fi
	step="waiting for the PostgreSQL cluster $ver/$name on port $port"
	ready=0
	for _ in $(seq 1 30); do
		if pg_isready -q -p "$port"; then
			ready=1
			break
		fi
		sleep 1
	done
	((ready)) ||
		die "the PostgreSQL cluster $ver/$name accepts no connections on port $port after 30 s (see /var/log/postgresql/postgresql-$ver-$name.log)"

	dsn="postgres://redlab:redlab@127.0.0.1:${port}/redlab?sslmode=disable"
	step="logging in to PostgreSQL as redlab"
	if ! redlab_ok "$dsn"; then
		is_root || die "cannot log in to PostgreSQL as redlab (password redlab, superuser) to database redlab at 127.0.0.1:$port
setup: create the role and database with: $(as_root_cmd "bash scripts/setup.sh test")"
		step="creating the PostgreSQL role redlab"
		if [ "$(as_postgres psql -X -p "$port" -tAc "SELECT 1 FROM pg_roles WHERE rolname = 'redlab'")" = 1 ]; then
			sql="ALTER ROLE redlab WITH LOGIN SUPERUSER PASSWORD 'redlab'"
		else
			sql="CREATE ROLE redlab WITH LOGIN SUPERUSER PASSWORD 'redlab'"
		fi
		echo "setup: PostgreSQL: $sql"
		as_postgres psql -X -q -p "$port" -v ON_ERROR_STOP=1 -c "$sql"
		step="creating the PostgreSQL database redlab"
		if [ "$(as_postgres psql -X -p "$port" -tAc "SELECT 1 FROM pg_database WHERE datname = 'redlab'")" != 1 ]; then
			echo "setup: PostgreSQL: creating the database redlab"
			as_postgres createdb -p "$port" -O redlab redlab
		fi
		did+=("role and database redlab")
		redlab_ok "$dsn" || die "created the role and database redlab, but still cannot log in as redlab at 127.0.0.1:$port (check pg_hba.conf of cluster $ver/$name)"
	fi

	step="writing bin/postgres-dsn"
	[ -d bin ] || {
		mkdir bin
		written+=(bin)
	}
	if [ "$(cat bin/postgres-dsn 2>/dev/null || true)" != "$dsn" ]; then
		printf '%s\n' "$dsn" >bin/postgres-dsn.tmp
		mv bin/postgres-dsn.tmp bin/postgres-dsn
		written+=(bin/postgres-dsn)
	fi
}

# --- npm packages of the test fixtures and the node-redlock adapter -----------

# The folders whose package-lock.json the tests and the drills need
# installed: hdr-histogram-js, an independent reader of loadgen's
# latency.hlog; @cdktf/provider-aws, the aws provider's schema for
# infra/verify; npm redlock and node redis, the node-redlock guards' client.
npm_dirs=(loadgen/testdata/hdrjs infra/verify/testdata/provider-aws inventory/foreign/node-redlock)
# Of those, what group demo needs: the drills' foreign guard.
demo_npm_dirs=(inventory/foreign/node-redlock)

# setup_npm DIR: npm ci in DIR. Its node_modules counts as fresh when the stamp
# written after the last npm ci holds the hash of package.json and
# package-lock.json as they are now.
setup_npm() {
	local dir=$1 want have
	[ -f "$dir/package.json" ] || return 0
	[ -f "$dir/package-lock.json" ] ||
		die "$dir has a package.json but no package-lock.json, which npm ci needs"
	step="hashing $dir/package.json and package-lock.json"
	want=$(cat "$dir/package.json" "$dir/package-lock.json" | sha256sum | cut -d' ' -f1)
	have=$(cat "$dir/node_modules/.redlab-setup" 2>/dev/null || true)
	[ "$want" != "$have" ] || return 0
	step="npm ci --prefix $dir"
	echo "setup: npm ci --prefix $dir (node_modules missing, or not installed from this package.json and package-lock.json)"
	run_quiet npm ci --prefix "$dir" --no-audit --no-fund
	mkdir -p "$dir/node_modules"
	printf '%s\n' "$want" >"$dir/node_modules/.redlab-setup"
	written+=("$dir/node_modules")
	did+=("npm ci in $dir")
}

# --- tofu or terraform -------------------------------------------------------

setup_tofu() {
	if command -v tofu >/dev/null 2>&1 || command -v terraform >/dev/null 2>&1 || [ -x bin/tofu ]; then
		return 0
	fi
	command -v go >/dev/null 2>&1 || die "building OpenTofu needs Go on PATH (https://go.dev/dl/), or install tofu or terraform"
	step="make tools (building OpenTofu into ./bin/tofu)"
	[ -d bin ] || written+=(bin)
	echo "setup: no tofu or terraform on PATH and no ./bin/tofu: building OpenTofu with 'make tools' (slow: about 10-14 minutes on 2 cores)"
	make --no-print-directory tools
	written+=(bin/tofu)
	did+=("built bin/tofu")
}

# --- etcd server and etcdctl --------------------------------------------------

# etcd_pin MODULE: the version tools/etcd/go.mod requires of MODULE.
etcd_pin() { awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' tools/etcd/go.mod; }

# Fresh when bin/etcd and bin/etcdctl each report the version pinned in
# tools/etcd/go.mod; asking the binaries (a few ms) catches a build of another
# pin that file times would miss. A copy of the clone without tools/etcd (the
# set-up's own test) has nothing to build.
setup_etcd() {
	local server ctl have_server have_ctl
	[ -f tools/etcd/go.mod ] || return 0
	step="reading the etcd versions pinned in tools/etcd/go.mod"
	server=$(etcd_pin go.etcd.io/etcd/server/v3)
	ctl=$(etcd_pin go.etcd.io/etcd/etcdctl/v3)
	[ -n "$server" ] && [ -n "$ctl" ] ||
		die "tools/etcd/go.mod pins no go.etcd.io/etcd/server/v3 or go.etcd.io/etcd/etcdctl/v3"
	step="asking bin/etcd and bin/etcdctl their versions"
	have_server=$( (bin/etcd --version 2>/dev/null || true) | awk '$1 == "etcd" && $2 == "Version:" { print "v" $3; exit }')
	have_ctl=$( (bin/etcdctl version 2>/dev/null || true) | awk '$1 == "etcdctl" && $2 == "version:" { print "v" $3; exit }')
	[ "$have_server" != "$server" ] || [ "$have_ctl" != "$ctl" ] || return 0
	command -v go >/dev/null 2>&1 || die "building etcd needs Go on PATH (https://go.dev/dl/)"
	step="make etcd (building etcd $server and etcdctl $ctl into ./bin)"
	[ -d bin ] || written+=(bin)
	echo "setup: building etcd $server and etcdctl $ctl into ./bin with 'make etcd' (found ${have_server:-none} and ${have_ctl:-none}; about 1.5 minutes on 2 cores)"
	# -B: the binaries may be newer than go.mod and still of another pin.
	run_quiet make --no-print-directory -B etcd
	written+=(bin/etcd bin/etcdctl)
	did+=("built bin/etcd and bin/etcdctl $server")
}

if [ "$group" = test ]; then
	setup_postgres
	for dir in "${npm_dirs[@]}"; do
		setup_npm "$dir"
	done
	setup_tofu
	setup_etcd
else
	for dir in "${demo_npm_dirs[@]}"; do
		setup_npm "$dir"
	done
fi

# Run through sudo: what we created in the clone belongs to the user, or their
# next `make build` cannot write bin/.
if is_root && [ -n "${SUDO_UID:-}" ] && ((${#written[@]} > 0)); then
	step="giving ${written[*]} back to uid $SUDO_UID"
	chown -R "$SUDO_UID:${SUDO_GID:-$SUDO_UID}" "${written[@]}"
fi

ms=$((($(date +%s%N) - t0) / 1000000))
secs=$(printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100)))
if ((${#did[@]} == 0)); then
	echo "setup: all present for group $group: nothing to install (${secs} s)"
else
	summary=$(printf '%s; ' "${did[@]}")
	echo "setup: group $group ready in ${secs} s; this run: ${summary%; }"
fi
