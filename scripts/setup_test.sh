#!/usr/bin/env bash
# The test of scripts/setup.sh. It needs root (it runs the set-up for real, and
# runs it as the unprivileged user nobody), so .ci/run runs it, after the
# set-up; `make test-setup` runs it by hand. Without root it is skipped, loudly,
# or fails under CI=true, like every test here.
#
#  1. idempotency: once everything is there, a run of group test installs
#     nothing: its whole output is the one "nothing to install" line, and dpkg
#     installed nothing meanwhile. Its time is printed, not asserted.
#  2. non-root, a package missing: as nobody, with a PATH that reaches every
#     program but redis-server (a directory of links), the real detection
#     (command -v) names redis-server, prints the one install command and
#     exits 1.
#  3. root without apt-get: the same report, exit 1, nothing installed.
#  4. non-root, everything present: exit 0, and the bin/postgres-dsn it writes
#     names the cluster's real port.
#  5. a failing step is named on stderr (npm ci on a package-lock.json it
#     cannot use), in the first and in the second npm folder.
#  6. an unknown group is a usage error (exit 2).
#  7. PostgreSQL from scratch, on a throwaway cluster (REDLAB_PG_CLUSTER), so
#     that the cluster the other tests use is never touched: a stopped cluster
#     without the role is started and gets the role and database, the URL
#     logs in, a second run changes nothing, and as nobody a stopped cluster
#     is reported with the command that starts it. The cluster is dropped at
#     the end.
set -euo pipefail
cd "$(dirname "$0")/.."

fails=0
fail() {
	echo "FAIL: $*" >&2
	fails=$((fails + 1))
}
pass() { echo "ok: $*"; }

if [ "$(id -u)" != 0 ]; then
	if [ "${CI:-}" = true ]; then
		echo "FAIL: scripts/setup_test.sh needs root (CI=true, so this is a failure)" >&2
		exit 1
	fi
	echo "SKIPPING scripts/setup_test.sh: it needs root (it runs the set-up and runs it as nobody)" >&2
	exit 0
fi

tmp=$(mktemp -d -t redlab-setup-test.XXXXXX)
pgver=""
pgname=redlabsetuptest$$
cleanup() {
	if [ -n "$pgver" ]; then
		pg_dropcluster --stop "$pgver" "$pgname" >/dev/null 2>&1 ||
			echo "setup_test: could not drop the PostgreSQL cluster $pgver/$pgname" >&2
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
chmod 755 "$tmp"

# run NAME CMD...: run CMD, keeping its status in rc and its stdout and stderr
# in $tmp/NAME.out and $tmp/NAME.err.
run() {
	local name=$1
	shift
	rc=0
	"$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
}
show() { sed 's/^/    | /' "$tmp/$1.out" "$tmp/$1.err" >&2; }

# dpkg's record of what it installed or upgraded, as a line count.
dpkg_installs() { grep -cE ' (install|upgrade) ' /var/log/dpkg.log 2>/dev/null || true; }

# A copy of the script in a clone-shaped directory nobody may write to.
repo=$tmp/repo
mkdir -p "$repo/scripts"
cp scripts/setup.sh "$repo/scripts/"
chown -R nobody "$repo"

# farm DIR EXCLUDED...: DIR holds a link to every program of the usual PATH
# directories except the excluded names; earlier directories win, as on PATH.
farm() {
	local dir=$1 d f n
	local -A seen=()
	local links=()
	shift
	for n in "$@"; do seen[$n]=1; done
	for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin /usr/local/go/bin; do
		[ -d "$d" ] || continue
		for f in "$d"/*; do
			n=${f##*/}
			[ -z "${seen[$n]:-}" ] || continue
			seen[$n]=1
			links+=("$f")
		done
	done
	mkdir -p "$dir"
	ln -s -t "$dir" -- "${links[@]}"
}

# --- 1. idempotency ---------------------------------------------------------
echo "== 1. a second run of group test installs nothing"
run first bash scripts/setup.sh test
if ((rc != 0)); then
	fail "the first run of setup.sh test exited $rc"
	show first
fi
before=$(dpkg_installs)
start=$(date +%s%N)
run second bash scripts/setup.sh test
ms=$((($(date +%s%N) - start) / 1000000))
after=$(dpkg_installs)
if ((rc != 0)); then
	fail "the second run exited $rc, want 0"
	show second
elif [ "$(wc -l <"$tmp/second.out")" != 1 ] || [ -s "$tmp/second.err" ] ||
	! grep -q '^setup: all present for group test: nothing to install' "$tmp/second.out"; then
	fail "the second run printed more than the one 'nothing to install' line:"
	show second
elif [ "$before" != "$after" ]; then
	fail "dpkg logged $((after - before)) installs or upgrades during the second run, want 0"
else
	pass "second run: $(cat "$tmp/second.out") (measured ${ms} ms)"
fi

# --- 2. non-root, redis-server missing --------------------------------------
echo "== 2. as nobody, with redis-server off PATH: names it, prints the install command, exits 1"
command -v redis-server >/dev/null || fail "redis-server is not installed here, so this case proves nothing"
farm "$tmp/path-no-redis" redis-server
run nobody-missing runuser -u nobody -- env -i HOME=/nonexistent PATH="$tmp/path-no-redis" \
	bash "$repo/scripts/setup.sh" demo
if ((rc != 1)); then
	fail "exit status $rc, want 1"
	show nobody-missing
elif ! grep -qx 'setup: missing for group demo: redis-server' "$tmp/nobody-missing.err" ||
	! grep -qE "^setup: install them with: (sudo apt-get install -y redis-server|su -c 'apt-get install -y redis-server')$" "$tmp/nobody-missing.err"; then
	fail "stderr does not name redis-server alone and the one command that installs it:"
	show nobody-missing
else
	pass "$(tr '\n' ' ' <"$tmp/nobody-missing.err")"
fi
# The same user and PATH, group test: redis-server is reported there too, and
# nothing else past the package check runs (no PostgreSQL, no bin/).
run nobody-missing-test runuser -u nobody -- env -i HOME=/nonexistent PATH="$tmp/path-no-redis" \
	bash "$repo/scripts/setup.sh" test
if ((rc != 1)) || ! grep -q '^setup: missing for group test: .*redis-server' "$tmp/nobody-missing-test.err" || [ -e "$repo/bin" ]; then
	fail "group test as nobody without redis-server: exit $rc, want 1 naming redis-server and writing nothing"
	show nobody-missing-test
else
	pass "group test as nobody: $(head -n 1 "$tmp/nobody-missing-test.err")"
fi

# --- 3. root, no apt-get ----------------------------------------------------
echo "== 3. as root without apt-get, redis-server off PATH: names it, installs nothing, exits 1"
farm "$tmp/path-no-apt" redis-server apt-get
before=$(dpkg_installs)
run root-no-apt env -i HOME="$tmp" PATH="$tmp/path-no-apt" bash "$repo/scripts/setup.sh" demo
after=$(dpkg_installs)
if ((rc != 1)) || ! grep -qx 'setup: missing for group demo: redis-server' "$tmp/root-no-apt.err" ||
	! grep -q 'no apt-get' "$tmp/root-no-apt.err"; then
	fail "exit $rc, want 1 with redis-server named and 'no apt-get'"
	show root-no-apt
elif [ "$before" != "$after" ] || grep -q installing "$tmp/root-no-apt.out"; then
	fail "it tried to install without apt-get"
	show root-no-apt
else
	pass "$(tr '\n' ' ' <"$tmp/root-no-apt.err")"
fi

# --- 4. non-root, all present -----------------------------------------------
echo "== 4. as nobody with everything present: exit 0, bin/postgres-dsn has the real port"
port=$(pg_lsclusters -h | awk '$4 ~ /^online/ { print $3; exit }')
run nobody-ok runuser -u nobody -- env -i HOME=/nonexistent PATH="$PATH" bash "$repo/scripts/setup.sh" test
want="postgres://redlab:redlab@127.0.0.1:${port}/redlab?sslmode=disable"
got=$(cat "$repo/bin/postgres-dsn" 2>/dev/null || true)
if ((rc != 0)) || ! grep -q 'nothing to install' "$tmp/nobody-ok.out"; then
	fail "exit $rc, want 0 and 'nothing to install'"
	show nobody-ok
elif [ -z "$port" ] || [ "$got" != "$want" ]; then
	fail "bin/postgres-dsn: got '$got', want '$want'"
else
	pass "$(cat "$tmp/nobody-ok.out"); bin/postgres-dsn = $got"
fi
if PGCONNECT_TIMEOUT=5 psql -X -w -tA -d "$got" -c 'SELECT 1' >/dev/null 2>&1; then
	pass "psql logs in with that URL"
else
	fail "psql cannot log in with '$got'"
fi

# --- 5. a failing step is named ---------------------------------------------
echo "== 5. a failing step (npm ci on an unusable package-lock.json) is named on stderr"
hdr=$repo/loadgen/testdata/hdrjs
mkdir -p "$hdr"
echo '{"name": "setup-test", "version": "1.0.0", "private": true}' >"$hdr/package.json"
echo '{ not json' >"$hdr/package-lock.json"
run npm-broken bash "$repo/scripts/setup.sh" test
if ((rc == 0)) || ! grep -q "^setup: failed while npm ci --prefix loadgen/testdata/hdrjs (exit status $rc)\$" "$tmp/npm-broken.err"; then
	fail "exit $rc, want non-zero and 'setup: failed while npm ci --prefix loadgen/testdata/hdrjs' on stderr"
	show npm-broken
else
	pass "$(tail -n 1 "$tmp/npm-broken.err")"
fi
# Every folder of the list is installed, not only the first.
rm -rf "${hdr:?}"
aws=$repo/infra/verify/testdata/provider-aws
mkdir -p "$aws"
echo '{"name": "setup-test", "version": "1.0.0", "private": true}' >"$aws/package.json"
echo '{ not json' >"$aws/package-lock.json"
run npm-broken-aws bash "$repo/scripts/setup.sh" test
if ((rc == 0)) || ! grep -q "^setup: failed while npm ci --prefix infra/verify/testdata/provider-aws (exit status $rc)\$" "$tmp/npm-broken-aws.err"; then
	fail "exit $rc, want non-zero and 'setup: failed while npm ci --prefix infra/verify/testdata/provider-aws' on stderr"
	show npm-broken-aws
else
	pass "$(tail -n 1 "$tmp/npm-broken-aws.err")"
fi
rm -rf "${repo:?}/infra"

# --- 6. usage ---------------------------------------------------------------
echo "== 6. an unknown group is a usage error"
run usage bash scripts/setup.sh everything
if ((rc != 2)) || ! grep -q "unknown group 'everything'" "$tmp/usage.err"; then
	fail "exit $rc, want 2 and 'unknown group'"
	show usage
else
	pass "$(cat "$tmp/usage.err")"
fi

# --- 7. PostgreSQL from scratch -------------------------------------------
echo "== 7. a stopped cluster without the role: started, role and database created; as nobody, reported"
rm -rf "${hdr:?}"
ver=$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -n | tail -n 1)
if ! pg_createcluster "$ver" "$pgname" >"$tmp/createcluster.out" 2>&1; then
	fail "pg_createcluster $ver $pgname failed:"
	show createcluster
else
	pgver=$ver
	pgport=$(pg_lsclusters -h | awk -v want="$ver/$pgname" '$1 "/" $2 == want { print $3 }')
	status=$(pg_lsclusters -h | awk -v want="$ver/$pgname" '$1 "/" $2 == want { print $4 }')
	[ "$status" = down ] || fail "the new cluster is $status, want down"
	run pg-first env REDLAB_PG_CLUSTER="$ver/$pgname" bash "$repo/scripts/setup.sh" test
	want="postgres://redlab:redlab@127.0.0.1:${pgport}/redlab?sslmode=disable"
	got=$(cat "$repo/bin/postgres-dsn" 2>/dev/null || true)
	if ((rc != 0)); then
		fail "exit $rc, want 0"
		show pg-first
	elif ! grep -q "^setup: starting the PostgreSQL cluster $ver/$pgname" "$tmp/pg-first.out" ||
		! grep -q '^setup: PostgreSQL: CREATE ROLE redlab' "$tmp/pg-first.out" ||
		! grep -q '^setup: PostgreSQL: creating the database redlab' "$tmp/pg-first.out"; then
		fail "the output does not show the cluster started and the role and database created:"
		show pg-first
	elif [ "$got" != "$want" ]; then
		fail "bin/postgres-dsn: got '$got', want '$want'"
	elif ! [ "$(PGCONNECT_TIMEOUT=5 psql -X -w -tA -d "$got" -c 'SELECT rolsuper FROM pg_roles WHERE rolname = current_user' 2>&1)" = t ]; then
		fail "cannot log in as a superuser with '$got'"
	else
		pass "$(tail -n 1 "$tmp/pg-first.out"); logs in at port $pgport"
	fi
	run pg-second env REDLAB_PG_CLUSTER="$ver/$pgname" bash "$repo/scripts/setup.sh" test
	if ((rc != 0)) || [ "$(wc -l <"$tmp/pg-second.out")" != 1 ] || ! grep -q 'nothing to install' "$tmp/pg-second.out"; then
		fail "second run on the new cluster: exit $rc, want 0 and only 'nothing to install'"
		show pg-second
	else
		pass "second run: $(cat "$tmp/pg-second.out")"
	fi
	pg_ctlcluster "$ver" "$pgname" stop
	run pg-nobody runuser -u nobody -- env -i HOME=/nonexistent PATH="$PATH" REDLAB_PG_CLUSTER="$ver/$pgname" \
		bash "$repo/scripts/setup.sh" test
	if ((rc != 1)) || ! grep -q "^setup: the PostgreSQL cluster $ver/$pgname (port $pgport) is down\$" "$tmp/pg-nobody.err" ||
		! grep -q "pg_ctlcluster $ver $pgname start" "$tmp/pg-nobody.err"; then
		fail "as nobody with the cluster down: exit $rc, want 1, the cluster named and the command that starts it"
		show pg-nobody
	else
		pass "$(tr '\n' ' ' <"$tmp/pg-nobody.err")"
	fi
fi

if ((fails > 0)); then
	echo "FAIL: scripts/setup_test.sh: $fails failures" >&2
	exit 1
fi
echo "PASS: scripts/setup_test.sh"
