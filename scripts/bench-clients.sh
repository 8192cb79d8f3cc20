#!/usr/bin/env bash
# make bench-clients: produce and consume throughput of each client against
# one fila-server (1 KiB messages; one producer with 256 outstanding, one
# consumer with prefetch 1024 acking each), the Go SDK (fila bench) beside
# the Python client and, when built, the TypeScript client. Prints a table.
# COUNT= sets the messages per run (default 50000).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/bin}
PYTHON=${PYTHON:-python3}
COUNT=${COUNT:-50000}
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
(cd "$dir" && FILA_SERVER_LISTEN_ADDR=127.0.0.1:0 FILA_STORAGE_DATA_DIR="$dir" exec "$BIN/fila-server" 2>"$dir/log") &
pid=$!
addr=
for _ in $(seq 600); do
	addr=$(sed -n 's/.*msg="fila-server listening" addr=\([^ ]*\).*/\1/p' "$dir/log" | head -1)
	[ -n "$addr" ] && break
	sleep 0.1
done
[ -n "$addr" ] || { echo "fila-server did not listen:"; cat "$dir/log"; exit 1; }

go_rate() { # mode, then fila bench's flags
	"$BIN/fila" --addr "$addr" --output json bench "$@" --no-progress --count "$COUNT" --size 1024 |
		"$PYTHON" -c 'import json,sys; d=json.load(sys.stdin); r=next(v["msgs_per_s"] for v in d.values() if isinstance(v, dict) and "msgs_per_s" in v); print(json.dumps({"client":"go","mode":sys.argv[1],"msgs_per_s":r}))' "$1"
}
results=()
results+=("$(go_rate produce --producers 1 --outstanding 256 --batch 1)")
results+=("$(go_rate consume --consumers 1 --prefetch 1024 --batch 1)")
for mode in produce consume; do
	results+=("$("$PYTHON" clients/python/bench.py --addr "$addr" --mode "$mode" --count "$COUNT" --size 1024)")
done
if [ -f clients/typescript/dist/bench.js ] && command -v node >/dev/null; then
	for mode in produce consume; do
		results+=("$(node clients/typescript/dist/bench.js --addr "$addr" --mode "$mode" --count "$COUNT" --size 1024)")
	done
fi
printf '%s\n' "${results[@]}" | "$PYTHON" -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
go = {r["mode"]: r["msgs_per_s"] for r in rows if r["client"] == "go"}
print("%-12s%-10s%12s%8s" % ("client", "mode", "msgs/s", "of Go"))
for r in rows:
    base = go.get(r["mode"]) or 0
    share = "%.0f%%" % (100 * r["msgs_per_s"] / base) if base else "-"
    print("%-12s%-10s%12.0f%8s" % (r["client"], r["mode"], r["msgs_per_s"], share))
'
