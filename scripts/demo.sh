#!/usr/bin/env bash
# make demo: build redlab, stand up five Redis nodes, run a 30-second load
# through the redlock guard with zipf-distributed SKUs, print the summary and
# the path of report.html, and tear everything down again. Nothing is left
# running, whatever happens (trap on EXIT, INT and TERM).
#
# The nodes come from the local lab (`redlab lab up`, OpenTofu/Terraform +
# supervised redis-server behind toxiproxy) when a tofu/terraform binary is
# available; otherwise five plain redis-server processes on free ports, and the
# demo says so. `make demo` runs scripts/setup.sh demo first (redis-server);
# it does not build OpenTofu, which takes 10-14 minutes: `make tools` does.
#
# Knobs: DEMO_RATE (100), DEMO_DURATION (30s), DEMO_KEYS (zipf:1000:0.99),
# DEMO_NODE_TIMEOUT (the redlock default, 50ms), DEMO_OUT (runs/demo-TIMESTAMP),
# DEMO_NODES=redis to skip the lab.
#
# 100/s is what the lab sustains with margin on a 2-core VM: measured there,
# every reservation costs about 14 ms of CPU in all (load generator with its
# SQLite store 5.5, Toxiproxy 5, redis-server 3.5; fsync itself is ~0.3 ms),
# so 100/s keeps ~1.4 of 2 cores busy with acquire p99 ~5-10 ms, 150/s is the
# knee, and 200/s or 300/s saturate the CPU and collapse (~99% unavailable:
# every attempt times out at the 50 ms node timeout and retries).
# `redlab sweep` finds a given machine's knee. Past the knee the open-loop
# load shows what overload does to a lock, and does not recover on its own.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
RATE=${DEMO_RATE:-100}
DURATION=${DEMO_DURATION:-30s}
KEYS=${DEMO_KEYS:-zipf:1000:0.99}
OUT=${DEMO_OUT:-runs/demo-$(date +%Y%m%d-%H%M%S)}
BIN=bin/redlab

work=$(mktemp -d -t redlab-demo.XXXXXX)
mode=""
pids=()

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ "$mode" = lab ]; then
		"$BIN" lab down --state-dir "$work/lab" >"$work/lab-down.log" 2>&1 ||
			{ echo "demo: lab down failed:" >&2; cat "$work/lab-down.log" >&2; }
	fi
	if [ ${#pids[@]} -gt 0 ]; then
		kill "${pids[@]}" 2>/dev/null || true
		wait "${pids[@]}" 2>/dev/null || true
	fi
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

echo "demo: building $BIN"
mkdir -p bin
"$GO" build -o "$BIN" ./cmd/redlab

tf=${REDLAB_TF:-$(command -v tofu || command -v terraform || true)}
nodes=""
if [ "${DEMO_NODES:-lab}" = lab ] && { [ -z "$tf" ] || [ ! -x "$tf" ]; }; then
	echo "demo: no tofu or terraform (on PATH or ./bin/tofu): running on five plain redis-server nodes, not the Terraform-provisioned lab."
	echo "demo: 'make tools' builds OpenTofu into ./bin (about 10-14 minutes on 2 cores); 'make demo' then uses the lab."
fi
if [ "${DEMO_NODES:-lab}" = lab ] && [ -n "$tf" ] && [ -x "$tf" ] && grep -q "^  lab " <<<"$("$BIN" help 2>&1)"; then
	# A base port whose 15 ports (proxy, redis, control of five nodes) are free.
	base=""
	for try in 7100 $(shuf -i 20000-40000 -n 20); do
		ok=1
		for off in 1 2 3 4 5 101 102 103 104 105 201 202 203 204 205; do
			port_free $((try + off)) || { ok=0; break; }
		done
		if [ $ok = 1 ]; then base=$try; break; fi
	done
	if [ -n "$base" ]; then
		echo "demo: bringing up the five-node lab ($tf)"
		mode=lab
		# The default lab: plain data directories (the power-loss filesystem,
		# FUSE on every write and fsync, is for drills that cut power).
		if REDLAB_TF="$tf" "$BIN" lab up --state-dir "$work/lab" --base-port "$base" >"$work/lab-up.log" 2>&1; then
			# The last line exports the lab's nodes, state dir and credentials.
			eval "$(tail -1 "$work/lab-up.log")"
			nodes=$REDLAB_NODES
			grep -v '^export ' "$work/lab-up.log" || true
		else
			echo "demo: lab up failed, falling back to plain redis-server nodes:" >&2
			tail -20 "$work/lab-up.log" >&2
		fi
	fi
fi

if [ -z "$nodes" ]; then
	command -v redis-server >/dev/null || { echo "demo: redis-server is not installed; 'bash scripts/setup.sh demo' installs it (make demo runs it)" >&2; exit 1; }
	echo "demo: starting five redis-server nodes"
	addrs=()
	port=$(shuf -i 20000-40000 -n 1)
	for i in 1 2 3 4 5; do
		while ! port_free "$port"; do port=$((port + 1)); done
		dir="$work/node$i"
		mkdir -p "$dir"
		cat >"$dir/redis.conf" <<-EOF
			bind 127.0.0.1
			port $port
			protected-mode yes
			daemonize no
			dir $dir
			appendonly yes
			appendfsync always
			save ""
			maxmemory-policy noeviction
			logfile $dir/redis.log
		EOF
		# Own session: a Ctrl-C for the demo must not reach the nodes before
		# the load has drained and reported.
		if command -v setsid >/dev/null; then setsid redis-server "$dir/redis.conf" & else redis-server "$dir/redis.conf" & fi
		pids+=($!)
		addrs+=("127.0.0.1:$port")
		port=$((port + 1))
	done
	for a in "${addrs[@]}"; do
		for _ in $(seq 1 100); do
			port_free "${a##*:}" || break
			sleep 0.1
		done
		port_free "${a##*:}" && { echo "demo: $a did not come up" >&2; exit 1; }
	done
	nodes=$(IFS=,; echo "${addrs[*]}")
fi

echo "demo: $DURATION of load at $RATE/s through the redlock guard, keys $KEYS, nodes $nodes"
timeout=()
if [ -n "${DEMO_NODE_TIMEOUT:-}" ]; then timeout=(--node-timeout "$DEMO_NODE_TIMEOUT"); fi
"$BIN" load --nodes "$nodes" --guard redlock --replicas 2 --rate "$RATE" --duration "$DURATION" \
	--keys "$KEYS" --stock 100000 --out "$OUT" --progress "${timeout[@]}" \
	--threshold 'safety.double_grants==0' --threshold 'safety.lost_updates==0' --threshold 'safety.oversell==0'
echo
echo "demo: open $(cd "$OUT" && pwd)/report.html"
