#!/usr/bin/env bash
# The price of TLS on the lab (docs/benchmarks.md, "TLS in transit"): two
# labs of five nodes side by side, one plain and one TLS-only (lab up --tls),
# both with --restart-delay 0s. Loads alternate between them, ROUNDS times
# each, so that whatever else the machine does lands on both alike; each
# reports acquire p50/p99 and the CPU of every process (--lab-cpu: the
# generator and that lab's redis-servers and supervisors with their fronts)
# per reservation. Then infra/lab/internal/reconnect kills node 2 of each
# lab RECONNECT times and times the outage a lock client sees, from the
# kill to its first answered PING: a restart at once, then a TCP connect,
# or a TCP connect and a TLS handshake.
#
# Knobs: TLSCOST_RATE (100), TLSCOST_DURATION (20s), TLSCOST_ROUNDS (3),
# TLSCOST_RECONNECT (10), TLSCOST_OUT (runs/tlscost-TIMESTAMP),
# TLSCOST_BASE_PORT (8600; the TLS lab on base+400).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
BIN=bin/redlab
RATE=${TLSCOST_RATE:-100}
DURATION=${TLSCOST_DURATION:-20s}
ROUNDS=${TLSCOST_ROUNDS:-3}
RECONNECT=${TLSCOST_RECONNECT:-10}
OUT=${TLSCOST_OUT:-runs/tlscost-$(date +%Y%m%d-%H%M%S)}
BASE=${TLSCOST_BASE_PORT:-8600}
[ -e "$OUT" ] && { echo "tlscost: $OUT exists: set TLSCOST_OUT" >&2; exit 1; }

work=$(mktemp -d -t redlab-tlscost.XXXXXX)
started=()
cleanup() {
	local rc=$? d
	trap - EXIT INT TERM
	for d in "${started[@]}"; do
		"$BIN" lab down --state-dir "$d" >"$work/down.log" 2>&1 || { echo "tlscost: lab down $d failed:" >&2; cat "$work/down.log" >&2; }
	done
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p bin "$OUT"
"$GO" build -o "$BIN" ./cmd/redlab
for kind in plain tls; do
	base=$BASE flags=()
	[ "$kind" = tls ] && base=$((BASE + 400)) flags=(--tls)
	started+=("$work/$kind")
	echo "tlscost: lab up ($kind, base $base)"
	"$BIN" lab up --state-dir "$work/$kind" --base-port "$base" --restart-delay 0s "${flags[@]}" >"$work/$kind-up.log" 2>&1 ||
		{ echo "tlscost: lab up $kind failed:" >&2; cat "$work/$kind-up.log" >&2; exit 1; }
	tail -1 "$work/$kind-up.log" | sed 's/^export //' | tr ' ' '\n' >"$work/$kind.env"
done

for r in $(seq 1 "$ROUNDS"); do
	for kind in plain tls; do
		echo "tlscost: round $r, $kind: $DURATION at $RATE/s"
		(
			while IFS= read -r kv; do export "${kv?}"; done <"$work/$kind.env"
			"$BIN" load --guard redlock --keys uniform:1000 --lab-cpu --rate "$RATE" --duration "$DURATION" \
				--out "$OUT/$kind-$r" >"$OUT/$kind-$r.log" 2>&1
		) || { echo "tlscost: load failed:" >&2; cat "$OUT/$kind-$r.log" >&2; exit 1; }
	done
done

for kind in plain tls; do
	echo "tlscost: reconnect, $kind: $RECONNECT kills of node 2"
	"$GO" run ./infra/lab/internal/reconnect --state-dir "$work/$kind" --rounds "$RECONNECT" | tee "$OUT/reconnect-$kind.txt"
done

{
	echo "| round | lab | reserved | acquire p50 ms | acquire p99 ms | CPU per reservation ms |"
	echo "|---|---|---:|---:|---:|---:|"
	for r in $(seq 1 "$ROUNDS"); do
		for kind in plain tls; do
			jq -r --arg r "$r" --arg k "$kind" '"| \($r) | \($k) | \(.outcomes.reserved) of \(.requests) | \(.acquire_latency_ms.p50) | \(.acquire_latency_ms.p99) | \(.cpu_ms_per_reserved) |"' "$OUT/$kind-$r/summary.json"
		done
	done
	echo
	cat "$OUT/reconnect-plain.txt" "$OUT/reconnect-tls.txt"
	echo
	echo "_scripts/tlscost.sh, $(date -u +%Y-%m-%d): two labs of 5 nodes (appendfsync always, restart delay 0s), redlock guard, 2 in-process replicas, uniform:1000 keys, $DURATION at $RATE/s per round, rounds alternating; $(nproc) CPUs; CPU summed over the generator and that lab's processes._"
} | tee "$OUT/table.md"
