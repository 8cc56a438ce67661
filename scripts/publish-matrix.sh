#!/usr/bin/env bash
# Puts a measured drill matrix (the matrix.md `make drills` writes) into
# README.md and runbooks/README.md, between their matrix markers.
#   scripts/publish-matrix.sh [runs/drills/matrix.md]
set -euo pipefail
cd "$(dirname "$0")/.."
matrix=${1:-runs/drills/matrix.md}
[ -s "$matrix" ] || { echo "publish-matrix: $matrix is missing or empty: run 'make drills' first" >&2; exit 1; }
put() { # file, link prefix for the drill runbooks
	local file=$1 prefix=$2 tmp
	grep -q '^<!-- matrix:begin -->$' "$file" && grep -q '^<!-- matrix:end -->$' "$file" ||
		{ echo "publish-matrix: $file lacks the <!-- matrix:begin --> / <!-- matrix:end --> lines" >&2; exit 1; }
	tmp=$(mktemp)
	awk -v m="$matrix" -v p="$prefix" '
		/^<!-- matrix:begin -->$/ { print; while ((getline l < m) > 0) { gsub(/\]\(drills\//, "](" p, l); print l }; skip = 1; next }
		/^<!-- matrix:end -->$/ { skip = 0 }
		!skip { print }' "$file" >"$tmp"
	mv "$tmp" "$file"
	echo "publish-matrix: $file"
}
put README.md runbooks/drills/
put runbooks/README.md drills/
