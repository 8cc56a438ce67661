#!/usr/bin/env bash
# make cost: the price of safety, the table of runbooks/README.md's decision
# guide. One local lab (five Redis nodes with appendfsync always, three etcd
# members with fsync on), and for each guard, one after another on it:
#   common  COST_COMMON_RATE (50/s) for COST_COMMON (15 s): reservation and
#           lock latency at one rate every guard sustains;
#   sweep   the knee: from the first of COST_RATES, doubling past the last,
#           until a step misses the SLO (then one step between the knee and
#           the miss), so that no knee is the top of the sweep; the SLO is
#           decision p99 under 10 ms with outcomes.reserved>=99%: the lock's
#           acquire for the guards that take a lock (db-for-update's is the
#           row lock), the whole reservation for db-atomic and db-version,
#           where the database decides in the write itself; steps of
#           COST_STEP (15 s: at 50/s, 750 reservations a step);
#   idle    the lab's processes with no load for COST_IDLE (10 s): the
#           baseline printed beside the CPU;
#   low, high  a quarter and half the knee for COST_MARGINAL (20 s) each,
#           one after the other, with --lab-cpu: the CPU per reservation is
#           the slope of every process's CPU between the two (the generator
#           with its SQLite store, the redis-servers, the etcd members and
#           their supervisors), so the idle lab and the fixed costs drop out;
#   over    three times the knee for COST_OVER (10 s): goodput past it.
# Keys are uniform:1000 (little contention: the price of the lock itself;
# runbooks/drills/hot-key-contention.md measures contention).
#
# The full run takes about 25 minutes and needs the machine to itself.
# Knobs: COST_QUICK=1 (a few short steps: checks the script, prints the table,
# leaves the runbooks alone), COST_GUARDS, COST_RATES, COST_MAX_RATE, COST_STEP,
# COST_MARGINAL, COST_IDLE, COST_OUT, COST_BASE_PORT (8300: nodes on base+1..,
# etcd clients on base+601..).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
BIN=bin/redlab
TABLE=bin/capacitytable
GUARDS=${COST_GUARDS:-redis-single redlock redlock-fenced etcd etcd-fenced db-atomic db-version db-for-update}
COMMON_RATE=${COST_COMMON_RATE:-50}
if [ -n "${COST_QUICK:-}" ]; then
	RATES=${COST_RATES:-50,100}
	MAX_RATE=${COST_MAX_RATE:-400}
	STEP=${COST_STEP:-2s}
	COMMON=${COST_COMMON:-3s}
	OVER=${COST_OVER:-2s}
	MARGINAL=${COST_MARGINAL:-3s}
	IDLE=${COST_IDLE:-2s}
else
	RATES=${COST_RATES:-50,100,200,400}
	MAX_RATE=${COST_MAX_RATE:-51200}
	STEP=${COST_STEP:-15s}
	COMMON=${COST_COMMON:-15s}
	OVER=${COST_OVER:-10s}
	MARGINAL=${COST_MARGINAL:-20s}
	IDLE=${COST_IDLE:-10s}
fi
OUT=${COST_OUT:-runs/cost-$(date +%Y%m%d-%H%M%S)}
BASE=${COST_BASE_PORT:-8300}

# shellcheck source=scripts/labscratch.sh
. scripts/labscratch.sh
labscratch cost

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
# Measured on plain data directories, the lab's default; POWER_LOSS=true
# in the environment puts the power-loss filesystem under them instead.
POWER_LOSS="${POWER_LOSS:-false}"
"$BIN" lab up --power-loss="$POWER_LOSS" --state-dir "$labdir" --count 5 --etcd 3 --base-port "$BASE" --persistence always >"$work/lab-up.log" 2>&1 ||
	{ echo "cost: lab up failed:" >&2; cat "$work/lab-up.log" >&2; exit 1; }
# REDLAB_NODES, REDLAB_ETCD, the state directory and the login, as lab up
# exports them.
eval "$(grep '^export ' "$work/lab-up.log")"
[ -n "${REDLAB_ETCD:-}" ] || { echo "cost: lab up exported no REDLAB_ETCD:" >&2; cat "$work/lab-up.log" >&2; exit 1; }

# compact: rewrite the Redis nodes' AOFs and wait, before each
# measurement: the guards share one lab, and a redis-server rewrites its
# log on its own past 64 MB (about 450,000 lock+unlock cycles), a second
# of slow fsyncs inside whichever measurement runs then.
compact() {
	"$TABLE" -compact-aof "$REDLAB_NODES" || { echo "cost: the AOF rewrite before a measurement failed" >&2; exit 1; }
}

args=()
for g in $GUARDS; do
	dir=$OUT/$g
	mkdir -p "$dir"
	common=(--guard "$g" --keys uniform:1000 --lab-cpu --lock-ttl 10s)
	echo "cost: $g: $COMMON at ${COMMON_RATE}/s"
	compact
	"$BIN" load "${common[@]}" --rate "$COMMON_RATE" --duration "$COMMON" --out "$dir/common" >"$dir/common.log" 2>&1 ||
		{ echo "cost: $g at ${COMMON_RATE}/s failed:" >&2; cat "$dir/common.log" >&2; exit 1; }
	decision=acquire
	case $g in db-atomic | db-version) decision=e2e ;; esac
	echo "cost: $g: sweep $RATES and doubling until a step misses, $STEP steps, SLO $decision.p99<10ms"
	compact
	rc=0
	"$BIN" sweep "${common[@]}" --rates "$RATES" --until-miss --refine --max-rate "$MAX_RATE" --step-duration "$STEP" \
		--slo "$decision.p99<10ms" --slo 'outcomes.reserved>=99%' --out "$dir/sweep" >"$dir/sweep.log" 2>&1 || rc=$?
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 99 ]; then # 99: no rate met the SLO, which the table says
		echo "cost: $g: sweep failed (exit $rc):" >&2
		cat "$dir/sweep.log" >&2
		exit 1
	fi
	knee=$("$TABLE" -knee "$dir/sweep")
	# The CPU: the lab idle, then two rates well above it, back to back.
	compact
	"$TABLE" -idle "$labdir" -out "$dir/idle.json" -duration "$IDLE" | sed "s/^/cost: $g: /"
	low=$(awk -v k="$knee" 'BEGIN { r = k / 4; if (r < 10) r = 10; printf "%d", r }')
	high=$(awk -v k="$knee" 'BEGIN { r = k / 2; if (r < 20) r = 20; printf "%d", r }')
	for run in low high; do
		rate=$low
		[ "$run" = high ] && rate=$high
		echo "cost: $g: $MARGINAL at ${rate}/s, every process's CPU"
		"$BIN" load "${common[@]}" --rate "$rate" --duration "$MARGINAL" --out "$dir/$run" >"$dir/$run.log" 2>&1 ||
			{ echo "cost: $g at ${rate}/s failed:" >&2; cat "$dir/$run.log" >&2; exit 1; }
	done
	if [ "$knee" != 0 ]; then
		over=$(awk -v k="$knee" 'BEGIN { printf "%g", 3 * k }')
		echo "cost: $g: knee ${knee}/s; $OVER at ${over}/s"
		compact
		"$BIN" load "${common[@]}" --rate "$over" --duration "$OVER" --out "$dir/over" >"$dir/over.log" 2>&1 ||
			{ echo "cost: $g at ${over}/s failed:" >&2; cat "$dir/over.log" >&2; exit 1; }
	fi
	args+=("$g=$dir")
done

note="_\`make cost\`, $(date -u +%Y-%m-%d), $(nproc) CPUs: one lab of 5 Redis nodes (appendfsync always) and 3 etcd members (fsync on), SQLite store, uniform:1000 keys, lock TTL 10 s; ${COMMON} at ${COMMON_RATE}/s per guard; sweep steps of $STEP from $RATES /s on, doubling until a step misses the SLO (decision p99 < 10 ms: acquire, for db-atomic and db-version the reservation; and 99 % reserved), then one step between; the idle lab for $IDLE, then $MARGINAL at a quarter and at half the knee for the marginal CPU; $OVER at three times the knee._"
"$TABLE" -cost -note "$note" "${args[@]}" | tee "$OUT/table.md"
if [ -z "${COST_QUICK:-}" ]; then
	"$TABLE" -cost -note "$note" -readme runbooks/README.md "${args[@]}"
	echo "cost: runbooks/README.md updated; the runs are in $OUT"
else
	echo "cost: quick mode: runbooks/README.md left as it is; the table is in $OUT/table.md"
fi
