# Sourced by scripts/capacity.sh and scripts/cost.sh: a scratch directory
# with a lab state directory in it, taken down and removed when the script
# exits, also on error or interrupt.
#   labscratch NAME   sets work and labdir; set lab_started=1 before lab up.
# Needs BIN (the redlab binary).
labscratch() {
	scratch_name=$1
	work=$(mktemp -d -t "redlab-$scratch_name.XXXXXX")
	labdir=$work/lab
	lab_started=""
	trap labscratch_cleanup EXIT
	trap 'exit 130' INT TERM
}

labscratch_cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "$lab_started" ]; then
		"$BIN" lab down --state-dir "$labdir" >"$work/lab-down.log" 2>&1 ||
			{ echo "$scratch_name: lab down failed:" >&2; cat "$work/lab-down.log" >&2; }
	fi
	rm -rf "$work"
	exit "$rc"
}
