#!/usr/bin/env bash
# The default lab against bare redis-servers: `redlab lab up` with no flags
# (fronts, supervisors, plain data directories) and five plain redis-server
# processes with the same persistence (appendfsync always), the same load
# (`redlab load --rate 300 --duration 10s`), alternating, three rounds each,
# in one run. Prints the CPU per reservation of every process that served
# it (the generator and the nodes: the lab's with --lab-cpu, the plain
# servers' from /proc) and the ratio of the medians. About two minutes; the
# machine should be otherwise idle. docs/benchmarks.md has a run.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
BIN=bin/redlab
"$GO" build -o "$BIN" ./cmd/redlab
work=$(mktemp -d)
cleanup() {
	[ -f "$work/pids" ] && kill $(cat "$work/pids") 2>/dev/null || true
	"$BIN" lab down --state-dir "$work/lab" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
ticks=$(getconf CLK_TCK)
cpu_ticks() { # utime+stime of pids, in clock ticks
	local t=0 f
	for p in "$@"; do
		read -r -a f <"/proc/$p/stat"
		t=$((t + f[13] + f[14]))
	done
	echo "$t"
}
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
addrs=()
port=$(shuf -i 20000-40000 -n 1)
for i in 1 2 3 4 5; do
	while ! port_free "$port"; do port=$((port + 1)); done
	d=$work/node$i
	mkdir -p "$d"
	printf 'port %d\nbind 127.0.0.1\ndir %s\nappendonly yes\nappendfsync always\nsave ""\n' "$port" "$d" >"$d/redis.conf"
	redis-server "$d/redis.conf" >/dev/null 2>&1 &
	echo $! >>"$work/pids"
	addrs+=("127.0.0.1:$port")
	port=$((port + 1))
done
plain=$(IFS=,; echo "${addrs[*]}")
"$BIN" lab up --state-dir "$work/lab" >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; exit 1; }
per_res() { # run dir, extra CPU seconds of the nodes: ms per reservation
	python3 - "$1" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
res = s["outcomes"].get("reserved", 0)
print(round((s.get("generator_cpu_s", 0) + float(sys.argv[2])) * 1000 / res, 3) if res else "nan")
PY
}
labs=() plains=()
for round in 1 2 3; do
	out=$work/lab-$round
	(eval "$(tail -1 "$work/up.log")" && "$BIN" load --rate 300 --duration 10s --lab-cpu --out "$out" >/dev/null)
	nodes=$(python3 -c "import json;print(json.load(open('$out/summary.json')).get('processes_cpu_s',0))")
	labs+=("$(per_res "$out" "$nodes")")
	out=$work/plain-$round
	before=$(cpu_ticks $(cat "$work/pids"))
	env -u REDLAB_STATE_DIR -u REDLAB_CREDENTIALS "$BIN" load --nodes "$plain" --rate 300 --duration 10s --out "$out" >/dev/null
	after=$(cpu_ticks $(cat "$work/pids"))
	plains+=("$(per_res "$out" "$(echo "scale=3; ($after - $before) / $ticks" | bc)")")
	echo "round $round: default lab ${labs[-1]} ms, plain redis-servers ${plains[-1]} ms per reservation"
done
python3 - "${labs[@]}" "${plains[@]}" <<'PY'
import statistics, sys
v = [float(x) for x in sys.argv[1:]]
lab, plain = statistics.median(v[:3]), statistics.median(v[3:])
print(f"median: default lab {lab:.3f} ms, plain redis-servers {plain:.3f} ms per reservation: {lab / plain:.2f}x")
PY
