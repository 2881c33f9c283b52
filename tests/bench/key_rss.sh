#!/usr/bin/env bash
# key_rss.sh: what an Idempotency-Key costs the server's memory (RSS), apart
# from the record it created (docs/STORAGE.md "Idempotency keys", "Memory").
#
# One server, one user, --fsync interval, quotas off. N creates without a key
# (post_theme.lua), then N creates each with a key of its own
# (post_theme_keyed.lua): VmRSS is read from /proc before and after each, and
# the key's figure is the second growth less the first, over N. Then, for
# keys that hold their record (its PUT or DELETE came after: docs/STORAGE.md),
# every keyed record is deleted and the growth read again. Prints one line
# per phase and the figures per key.
#
#   tests/bench/key_rss.sh                 N=200000
#
# Environment: N (creates a phase, 200000), EVENTD_BIN (a Release build of this
# checkout by default), BENCH_SERVER_CPU / BENCH_CLIENT_CPU (0 / 1).
# Bounded: each phase stops after N answers or 120 s.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ ${1:-} == -h || ${1:-} == --help ]] && { bench_usage; exit 0; }
N=${N:-200000}
need wrk taskset
bench_init
bench_binary

rss_kb() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$EVENTD_PID/status"; }

data=$BENCH_WORK/data
key=$(bench_user_add "$data" bench)
bench_start_eventd "$data" "$BENCH_WORK/eventd.log" --fsync interval \
    --max-idempotency-keys-per-user 0 --max-idempotency-bytes-per-user 0 ||
    die "eventd did not start"
url=http://127.0.0.1:$EVENTD_PORT
export EVENTD_USER=bench EVENTD_KEY=$key

r0=$(rss_kb)
bench_seed "$BENCH_DIR/post_theme.lua" "$BENCH_WORK/plain.ids" "$N" 120 "$url" ||
    die "the creates without a key failed"
r1=$(rss_kb)
bench_seed "$BENCH_DIR/post_theme_keyed.lua" "$BENCH_WORK/keyed.ids" "$N" 120 "$url" ||
    die "the keyed creates failed"
r2=$(rss_kb)
# Every keyed record deleted: each key then holds its record as created.
EVENTD_IDS_FILE=$BENCH_WORK/keyed.ids bench_seed "$BENCH_DIR/delete_theme.lua" \
    "$BENCH_WORK/deleted.ids" "$N" 120 "$url" || die "the deletions failed"
r3=$(rss_kb)

echo "VmRSS: start $r0 kB, after $N creates $r1 kB, after $N keyed creates $r2 kB," \
    "after their records' deletion $r3 kB"
awk -v n="$N" -v a="$r0" -v b="$r1" -v c="$r2" -v d="$r3" 'BEGIN {
    rec = (b - a) * 1024 / n; keyed = (c - b) * 1024 / n
    printf "a create: %.0f bytes; a keyed create: %.0f bytes; the key: %.0f bytes\n", rec, keyed, keyed - rec
    printf "a key once its record is deleted: %.0f bytes more (the record kept, less the record freed)\n", (d - c) * 1024 / n
}'
