#!/usr/bin/env bash
# make cost: the price of safety, the table of runbooks/README.md's decision
# guide. One local lab (five Redis nodes with appendfsync always, three etcd
# members with fsync on), and for each guard, one after another on it:
#   common  COST_COMMON_RATE (50/s) for COST_COMMON (20 s): reservation and
#           lock latency, CPU of every process per reservation (--lab-cpu:
#           the generator with its SQLite store, the redis-servers, the etcd
#           members and their supervisors);
#   sweep   the knee: the highest rate of COST_RATES meeting e2e.p99<10ms
#           and outcomes.reserved>=99% (e2e, not acquire: the db guards
#           have no separate lock to time);
#   over    three times the knee for COST_OVER (10 s): goodput past it.
# Keys are uniform:1000 (little contention: the price of the lock itself;
# runbooks/drills/hot-key-contention.md measures contention).
#
# The full run takes about 20 minutes and needs the machine to itself.
# Knobs: COST_QUICK=1 (a few short steps: checks the script, prints the table,
# leaves the runbooks alone), COST_GUARDS, COST_RATES, COST_STEP, COST_OUT,
# COST_BASE_PORT (8300: nodes on base+1.., etcd clients on base+601..).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
BIN=bin/redlab
TABLE=bin/capacitytable
GUARDS=${COST_GUARDS:-redis-single redlock redlock-fenced etcd etcd-fenced db-atomic db-version db-for-update}
COMMON_RATE=${COST_COMMON_RATE:-50}
if [ -n "${COST_QUICK:-}" ]; then
	RATES=${COST_RATES:-50,100}
	STEP=${COST_STEP:-2s}
	COMMON=${COST_COMMON:-3s}
	OVER=${COST_OVER:-2s}
else
	RATES=${COST_RATES:-50,100,200,300,400,500,700,900}
	STEP=${COST_STEP:-10s}
	COMMON=${COST_COMMON:-20s}
	OVER=${COST_OVER:-10s}
fi
OUT=${COST_OUT:-runs/cost-$(date +%Y%m%d-%H%M%S)}
BASE=${COST_BASE_PORT:-8300}

work=$(mktemp -d -t redlab-cost.XXXXXX)
labdir=$work/lab
lab_started=""
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "$lab_started" ]; then
		"$BIN" lab down --state-dir "$labdir" >"$work/lab-down.log" 2>&1 ||
			{ echo "cost: lab down failed:" >&2; cat "$work/lab-down.log" >&2; }
	fi
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -e "$OUT" ]; then
	echo "cost: $OUT exists: set COST_OUT" >&2
	exit 1
fi
mkdir -p bin "$OUT"
echo "cost: building $BIN and $TABLE"
"$GO" build -o "$BIN" ./cmd/redlab
"$GO" build -o "$TABLE" ./loadgen/internal/capacitytable

echo "cost: lab up, 5 nodes (appendfsync always), 3 etcd members"
lab_started=1
"$BIN" lab up --state-dir "$labdir" --count 5 --etcd 3 --base-port "$BASE" --persistence always >"$work/lab-up.log" 2>&1 ||
	{ echo "cost: lab up failed:" >&2; cat "$work/lab-up.log" >&2; exit 1; }
# REDLAB_NODES, REDLAB_ETCD, the state directory and the login, as lab up
# exports them.
eval "$(grep '^export ' "$work/lab-up.log")"
[ -n "${REDLAB_ETCD:-}" ] || { echo "cost: lab up exported no REDLAB_ETCD:" >&2; cat "$work/lab-up.log" >&2; exit 1; }

args=()
for g in $GUARDS; do
	dir=$OUT/$g
	mkdir -p "$dir"
	common=(--guard "$g" --keys uniform:1000 --lab-cpu --lock-ttl 10s)
	echo "cost: $g: $COMMON at ${COMMON_RATE}/s"
	"$BIN" load "${common[@]}" --rate "$COMMON_RATE" --duration "$COMMON" --out "$dir/common" >"$dir/common.log" 2>&1 ||
		{ echo "cost: $g at ${COMMON_RATE}/s failed:" >&2; cat "$dir/common.log" >&2; exit 1; }
	echo "cost: $g: sweep $RATES, $STEP steps"
	rc=0
	"$BIN" sweep "${common[@]}" --rates "$RATES" --step-duration "$STEP" \
		--slo 'e2e.p99<10ms' --slo 'outcomes.reserved>=99%' --out "$dir/sweep" >"$dir/sweep.log" 2>&1 || rc=$?
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 99 ]; then # 99: no rate met the SLO, which the table says
		echo "cost: $g: sweep failed (exit $rc):" >&2
		cat "$dir/sweep.log" >&2
		exit 1
	fi
	knee=$("$TABLE" -knee "$dir/sweep")
	if [ "$knee" != 0 ]; then
		over=$(awk -v k="$knee" 'BEGIN { printf "%g", 3 * k }')
		echo "cost: $g: knee ${knee}/s; $OVER at ${over}/s"
		"$BIN" load "${common[@]}" --rate "$over" --duration "$OVER" --out "$dir/over" >"$dir/over.log" 2>&1 ||
			{ echo "cost: $g at ${over}/s failed:" >&2; cat "$dir/over.log" >&2; exit 1; }
	fi
	args+=("$g=$dir")
done

note="_\`make cost\`, $(date -u +%Y-%m-%d), $(nproc) CPUs: one lab of 5 Redis nodes (appendfsync always) and 3 etcd members (fsync on), SQLite store, uniform:1000 keys, lock TTL 10 s; ${COMMON} at ${COMMON_RATE}/s per guard, sweep steps of $STEP over $RATES /s with the SLO e2e p99 < 10 ms and 99 % reserved, $OVER at three times the knee. CPU summed over every process._"
"$TABLE" -cost -note "$note" "${args[@]}" | tee "$OUT/table.md"
if [ -z "${COST_QUICK:-}" ]; then
	"$TABLE" -cost -note "$note" -readme runbooks/README.md "${args[@]}"
	echo "cost: runbooks/README.md updated; the runs are in $OUT"
else
	echo "cost: quick mode: runbooks/README.md left as it is; the table is in $OUT/table.md"
fi
