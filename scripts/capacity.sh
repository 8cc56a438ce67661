#!/usr/bin/env bash
# make capacity: the capacity table of README.md. Four setups, each on a
# fresh local lab of five nodes: clients through the lab's fault fronts or
# straight to the redis-servers behind them, with appendfsync always and
# everysec. For each, `redlab sweep` finds the knee (the highest rate
# meeting acquire.p99<10ms and outcomes.reserved>=99%; past the last of
# CAPACITY_RATES it goes on doubling until a step misses, so no knee is the
# top of the sweep) and `redlab load` then offers three times it, with
# default settings, to measure goodput past the knee.
# At the knee's rate, the bare client (package loadgen/internal/floor,
# MeasureClient) for CAPACITY_CLIENT (the step's length): open loop, a SET
# NX PX and a compare-and-delete to every node in parallel and one SQLite
# reservation transaction per operation; the table gives the generator's
# CPU per reservation at the knee against it.
# Last, a spike: CAPACITY_SPIKE (20 s) at three times the knee, then
# CAPACITY_CALM (30 s) at half the knee; the table gives the time from the
# drop until acquire p99 stays under 10 ms with 99% reserved (a collapse
# that outlives its trigger never comes back).
# Every run accounts the CPU of every process (--lab-cpu: the generator,
# the redis-servers and the supervisors with their fronts; the supervisors
# idle on the direct path).
# Beside each knee, what the machine physically allows (package
# loadgen/internal/floor, recorded in $OUT/floor.json): before the lab
# comes up, appends+fdatasyncs per second on the filesystem of the lab's
# state directory, by one writer and by five; and, with the lab up at each
# fsync policy, the fan-out floor: the most lock+unlock cycles per second
# of the least a Redlock must do, straight to the five redis-servers. The
# table gives each knee as a share of its policy's floor, and replaces
# what lies between the capacity markers of README.md.
#
# The full run takes about 25 minutes and needs the machine to itself:
# whatever else runs shows up as latency and moves the knee.
#
# Knobs: CAPACITY_QUICK=1 (short steps and few rates, to check the script;
# prints the table and leaves README.md alone), CAPACITY_RATES,
# CAPACITY_STEP (step duration), CAPACITY_OVER (duration of the run at three
# times the knee), CAPACITY_FLOOR (duration of each floor measurement),
# CAPACITY_CLIENT (duration of the bare client), CAPACITY_MAX_RATE,
# CAPACITY_OUT (runs/capacity-TIMESTAMP),
# CAPACITY_BASE_PORT (8100, clear of the default lab and its monitoring: the
# nodes on base+1.., redis on base+101.., control on base+201..).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
BIN=bin/redlab
TABLE=bin/capacitytable
if [ -n "${CAPACITY_QUICK:-}" ]; then
	RATES=${CAPACITY_RATES:-50,100,200}
	STEP=${CAPACITY_STEP:-3s}
	OVER=${CAPACITY_OVER:-3s}
	SPIKE=${CAPACITY_SPIKE:-3s}
	CALM=${CAPACITY_CALM:-5s}
	FLOOR=${CAPACITY_FLOOR:-1s}
	CLIENT=${CAPACITY_CLIENT:-2s}
	MAX_RATE=${CAPACITY_MAX_RATE:-800}
else
	RATES=${CAPACITY_RATES:-100,200,300,400,500,600,700,800,1000,1200,1400,1600,2000,2400,2800,3200,4000}
	STEP=${CAPACITY_STEP:-20s}
	OVER=${CAPACITY_OVER:-20s}
	SPIKE=${CAPACITY_SPIKE:-20s}
	CALM=${CAPACITY_CALM:-30s}
	FLOOR=${CAPACITY_FLOOR:-5s}
	CLIENT=${CAPACITY_CLIENT:-$STEP}
	MAX_RATE=${CAPACITY_MAX_RATE:-64000}
fi
OUT=${CAPACITY_OUT:-runs/capacity-$(date +%Y%m%d-%H%M%S)}
BASE=${CAPACITY_BASE_PORT:-8100}
NODES=5

# shellcheck source=scripts/labscratch.sh
. scripts/labscratch.sh
labscratch capacity

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for off in 0 100 200; do
	for i in $(seq 1 $NODES); do
		port=$((BASE + off + i))
		port_free "$port" || { echo "capacity: port $port is in use: set CAPACITY_BASE_PORT" >&2; exit 1; }
	done
done
if [ -e "$OUT" ]; then
	echo "capacity: $OUT exists: set CAPACITY_OUT" >&2
	exit 1
fi

mkdir -p bin "$OUT"
echo "capacity: building $BIN and $TABLE"
"$GO" build -o "$BIN" ./cmd/redlab
"$GO" build -o "$TABLE" ./loadgen/internal/capacitytable

addrs() { # addrs OFFSET: the nodes' addresses at base+OFFSET+1..
	local a=() i
	for i in $(seq 1 $NODES); do a+=("127.0.0.1:$((BASE + $1 + i))"); done
	(IFS=,; echo "${a[*]}")
}

# compact: rewrite the nodes' AOFs and wait, before each measurement. A
# redis-server rewrites its log on its own once it passes
# auto-aof-rewrite-min-size (64 MB, about 450,000 lock+unlock cycles at
# 147 bytes each); a setup's sweep, bare client, run past the knee and
# spike add up to that, and a rewrite inside a measurement is a second of
# slow fsyncs pinned on the load (a spike's recovery once read 20 s for
# one such second 19 s after the drop).
compact() {
	"$TABLE" -compact-aof "$(addrs 100)" || { echo "capacity: the AOF rewrite before a measurement failed" >&2; exit 1; }
}

# The lab's credentials and state directory (for --lab-cpu) reach redlab
# through the environment, as `lab up` exports them.
export REDLAB_STATE_DIR=$labdir REDLAB_CREDENTIALS=$labdir/credentials.json
common=(--guard redlock --keys uniform:1000 --lab-cpu)
setups=()
# Measured on plain data directories, the lab's default; POWER_LOSS=true
# in the environment puts the power-loss filesystem under them instead.
POWER_LOSS="${POWER_LOSS:-false}"
floor=$OUT/floor.json
# The disk alone, before any redis-server writes to it.
mkdir -p "$labdir"
echo "capacity: the disk under $labdir: appends+fdatasyncs, $FLOOR each by one writer and by five"
"$TABLE" -floor "$floor" -disk "$labdir" -duration "$FLOOR"
for fsync in always everysec; do
	for path in fronts direct; do
		# Each setup on a lab of its own: a redis-server rewrites its AOF
		# once it passes auto-aof-rewrite-min-size (64 MB, about 400,000
		# locks), so on a shared lab the volume of earlier setups could
		# set off that rewrite inside a later setup's measurement (a run
		# on a shared lab had seconds of 20 to 47 ms acquire p99 where its
		# count of locks put the rewrite; docs/benchmarks.md).
		echo "capacity: lab up, $NODES nodes, appendfsync $fsync, for the $path setup"
		lab_started=1
		"$BIN" lab up --power-loss="$POWER_LOSS" --state-dir "$labdir" --count $NODES --base-port "$BASE" --persistence "$fsync" >"$work/lab-up.log" 2>&1 ||
			{ echo "capacity: lab up failed:" >&2; cat "$work/lab-up.log" >&2; exit 1; }
		if [ "$path" = fronts ]; then
			echo "capacity: appendfsync $fsync: the fan-out floor, $FLOOR direct to the nodes"
			"$TABLE" -floor "$floor" -fanout "$(addrs 100)" -appendfsync "$fsync" -duration "$FLOOR"
		fi
		dir=$OUT/$path-$fsync
		nodes=$(addrs 0)
		[ "$path" = direct ] && nodes=$(addrs 100)
		echo "capacity: $path, appendfsync $fsync: sweep $RATES, $STEP steps"
		compact
		rc=0
		"$BIN" sweep "${common[@]}" --nodes "$nodes" --rates "$RATES" --until-miss --max-rate "$MAX_RATE" --step-duration "$STEP" \
			--slo 'acquire.p99<10ms' --slo 'outcomes.reserved>=99%' --out "$dir/sweep" >"$dir.sweep.log" 2>&1 || rc=$?
		# 99: no rate met the SLO, which the table says.
		if [ "$rc" -ne 0 ] && [ "$rc" -ne 99 ]; then
			echo "capacity: sweep failed (exit $rc):" >&2
			cat "$dir.sweep.log" >&2
			exit 1
		fi
		knee=$("$TABLE" -knee "$dir/sweep")
		if [ "$knee" != 0 ]; then
			echo "capacity: $path, appendfsync $fsync: the bare client, $CLIENT at ${knee}/s"
			compact
			"$TABLE" -floor "$floor" -client "$nodes" -setup "$path:$fsync" -rate "$knee" -duration "$CLIENT"
			over=$(awk -v k="$knee" 'BEGIN { printf "%g", 3 * k }')
			echo "capacity: $path, appendfsync $fsync: knee ${knee}/s; $OVER at ${over}/s"
			compact
			"$BIN" load "${common[@]}" --nodes "$nodes" --rate "$over" --duration "$OVER" --out "$dir/over" >"$dir.over.log" 2>&1 ||
				{ echo "capacity: load at ${over}/s failed:" >&2; cat "$dir.over.log" >&2; exit 1; }
			calm=$(awk -v k="$knee" 'BEGIN { printf "%g", k / 2 }')
			echo "capacity: $path, appendfsync $fsync: spike, $SPIKE at ${over}/s then $CALM at ${calm}/s"
			compact
			"$BIN" load "${common[@]}" --nodes "$nodes" --stages "0s:$over,$SPIKE:$over,0s:$calm,$CALM:$calm" --out "$dir/spike" >"$dir.spike.log" 2>&1 ||
				{ echo "capacity: the spike failed:" >&2; cat "$dir.spike.log" >&2; exit 1; }
		else
			echo "capacity: $path, appendfsync $fsync: no rate met the SLO"
		fi
		setups+=("$path:$fsync=$dir")
		"$BIN" lab down --state-dir "$labdir" >"$work/lab-down.log" 2>&1 ||
			{ echo "capacity: lab down failed:" >&2; cat "$work/lab-down.log" >&2; exit 1; }
		lab_started=""
		rm -rf "$labdir"
	done
done

note="_\`make capacity\`, $(date -u +%Y-%m-%d): $NODES lab nodes, redlock guard, uniform:1000 keys, sweep steps of $STEP over $RATES /s and on, doubling, until a step misses the SLO; the bare client for $CLIENT at the knee; $OVER at three times the knee; the nodes' AOFs rewritten before each of these; $(nproc) CPUs; CPU summed over every process._"
if [ -n "${CAPACITY_QUICK:-}" ]; then
	"$TABLE" -floor "$floor" -note "$note" "${setups[@]}" | tee "$OUT/table.md"
	echo "capacity: quick mode: README.md left as it is; the table is in $OUT/table.md"
else
	"$TABLE" -floor "$floor" -note "$note" "${setups[@]}" | tee "$OUT/table.md"
	"$TABLE" -floor "$floor" -note "$note" -readme README.md "${setups[@]}"
	echo "capacity: README.md updated; the runs are in $OUT"
fi
