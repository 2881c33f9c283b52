#!/usr/bin/env bash
# tests/bench/compaction_latency.sh: how long does online compaction stall requests?
#
# Starts eventd (pinned to CPU 0, automatic compaction off) on a fresh data
# directory, creates RECORDS themes, then makes UPDATES updates so the log is
# several times the live data. Then latency_probe.py (pinned to CPU 1) keeps
# CONNS connections busy with GETs and POSTs, sends SIGUSR1 after a baseline,
# waits for the "compaction done" log line and prints the latency of the
# requests that overlapped the compaction. Target: max < LIMIT_MS (10 ms).
#
# Usage: tests/bench/compaction_latency.sh [--quick] [--strict]
#   --quick   RECORDS=20000 UPDATES=40000 unless set
#   --strict  exit 3 when the target is missed
# Environment: RECORDS (200000), UPDATES (600000), CONNS (4), FSYNC (interval),
# LIMIT_MS (10), and those of lib.sh (EVENTD_BIN, BENCH_KEEP, ...).
# Bounded: the fill phases stop after 300 s each, the compaction wait after 120 s.
set -uo pipefail

PROG=compaction_latency.sh
# shellcheck source=tests/bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STRICT=()
for arg in "$@"; do
    case $arg in
    --quick)
        RECORDS=${RECORDS:-20000}
        UPDATES=${UPDATES:-40000}
        ;;
    --strict) STRICT=(--strict) ;;
    -h | --help)
        bench_usage
        exit 0
        ;;
    *) die "unknown argument $arg (try --help)" ;;
    esac
done
RECORDS=${RECORDS:-200000}
UPDATES=${UPDATES:-600000}
CONNS=${CONNS:-4}
FSYNC=${FSYNC:-interval}
LIMIT_MS=${LIMIT_MS:-10}

need wrk taskset python3 timeout
bench_init
bench_binary

data=$BENCH_WORK/data
log=$BENCH_WORK/eventd.log
EVENTD_KEY=$(bench_user_add "$data" bench) || exit 1
export EVENTD_USER=bench EVENTD_KEY
# --compact-ratio 0: no automatic compaction, only the one this script asks for.
bench_start_eventd "$data" "$log" --fsync "$FSYNC" --compact-ratio 0 || exit 1
url="http://127.0.0.1:$EVENTD_PORT"
note "eventd pid $EVENTD_PID on $url (--fsync $FSYNC), binary $EVENTD_BIN"

ids=$BENCH_WORK/ids.txt
t0=$(date +%s.%N)
bench_seed "$BENCH_DIR/post_theme.lua" "$ids" "$RECORDS" 300 "$url" || exit 1
t1=$(date +%s.%N)
note "created $(wc -l <"$ids") themes in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
export EVENTD_IDS_FILE=$ids
bench_seed "$BENCH_DIR/put_theme.lua" "$BENCH_WORK/put.txt" "$UPDATES" 300 "$url" || exit 1
t2=$(date +%s.%N)
note "made $UPDATES updates in $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.1f", b - a }') s"
size_before=$(stat -c %s "$data/eventd.log")
note "log: $size_before bytes before compaction"

timeout -k 5 200 taskset -c "$BENCH_CLIENT_CPU" python3 "$BENCH_DIR/latency_probe.py" \
    --port "$EVENTD_PORT" --pid "$EVENTD_PID" --log "$log" --ids-file "$ids" \
    --conns "$CONNS" --limit-ms "$LIMIT_MS" --timeout 120 "${STRICT[@]}"
rc=$?
kill -0 "$EVENTD_PID" 2>/dev/null || { note "eventd died"; tail -n 5 "$log" >&2; exit 1; }
note "log: $(stat -c %s "$data/eventd.log") bytes after compaction"
grep -E "compaction (started|done|failed)" "$log" | sed 's/^/[eventd] /' >&2
bench_stop "$EVENTD_PID" || { note "eventd exited with status $?"; rc=1; }
exit $rc
