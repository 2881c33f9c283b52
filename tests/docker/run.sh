#!/bin/bash
# tests/docker/run.sh: builds docker/Dockerfile unchanged and checks the container
# end to end, with rootful podman (no Docker engine is needed; see docker/README.md):
#
#   1. the debian:bookworm-slim base, made once with debootstrap from the Debian
#      mirror apt already uses on this machine, imported and tagged as Docker's;
#   2. podman build (docker format, so HEALTHCHECK is kept), reusing cached layers;
#      the binary in the image is checked for PIE, full RELRO, a stack protector
#      and _FORTIFY_SOURCE (tests/lint/hardening.py; readelf runs on the host);
#   3. a container on a new volume, its port published on loopback: waits for
#      the image's HEALTHCHECK to pass, creates records with the demo user's key
#      (written to /data/demo-user.key, since the container's stdout is no
#      terminal), stops it with podman stop (exit code must be 0);
#   4. a second container on the same volume reads the records back;
#   5. a third listens where its command says;
#   6. a fourth, on a new volume holding only the backup that "eventd backup"
#      made inside the first while it served, reads the records back too.
#
# Every failure fails the script: nothing is skipped. Needs root and the packages
# deps/install.sh --test installs (podman, runc, netavark, iptables, debootstrap).
#
# State that is reused between runs lives in EVENTD_PODMAN_DIR (default
# /var/tmp/eventd-podman): base.tar (the debootstrapped base) and storage/
# (podman's images and layer cache). Delete the directory to start over.
# Run state (podman's runroot, which must not survive a reboot) lives in
# /run/eventd-podman and is wiped when the boot id changes.
set -euo pipefail
cd "$(dirname "$0")/../.."

WORK=${EVENTD_PODMAN_DIR:-/var/tmp/eventd-podman}
RUN=/run/eventd-podman
BASE=docker.io/library/debian:bookworm-slim
IMAGE=localhost/eventd:test
VOLUME=eventd-test-data
C1=eventd-test-1
C2=eventd-test-2
C3=eventd-test-3
C4=eventd-test-4
BACKUP_VOLUME=eventd-test-backup
# Bounds for every wait below.
HEALTH_WAIT_S=60
STOP_TIMEOUT_S=20 # > --drain-ms 5 s + --shutdown-timeout-ms 10 s (compose: 20s)
STORE_MAX_MB=3000
RUNTIME_MAX_MB=15

t0=$(date +%s)
log() { printf 'docker-test: [%3ds] %s\n' "$(($(date +%s) - t0))" "$*"; }
fail() {
    printf 'docker-test: FAIL: %s\n' "$*" >&2
    exit 1
}

[ "$(id -u)" -eq 0 ] || fail "needs root (rootful podman); run as root"
for tool in podman runc debootstrap apt-cache python3 readelf; do
    command -v "$tool" >/dev/null || fail "$tool not found: run ./deps/install.sh --test"
done

mkdir -p "$WORK/storage"
# A reboot ends every container: drop the old run state so podman starts clean
# (on most systems /run is a tmpfs and this happens by itself).
boot_id=$(cat /proc/sys/kernel/random/boot_id)
if [ "$(cat "$RUN/boot_id" 2>/dev/null || true)" != "$boot_id" ]; then
    rm -rf "$RUN"
    mkdir -p "$RUN"
    echo "$boot_id" >"$RUN/boot_id"
fi

# containers.conf, written at run time. Rootful podman's default ulimits
# (nofile 1048576) are above this machine's hard limits and runc then fails to
# start any container: use the host's hard limits, capped.
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
[ "$nofile" = unlimited ] && nofile=65536
[ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
export CONTAINERS_CONF="$WORK/containers.conf"
cat >"$CONTAINERS_CONF" <<EOF
# Written by tests/docker/run.sh on each run.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$RUN/libpod"
[network]
network_backend = "netavark"
network_config_dir = "$WORK/networks"
EOF
# Podman runs health checks from systemd timers; without systemd (CI, this
# script) they are run on demand with "podman healthcheck run" below.
export DISABLE_HC_SYSTEMD=true
pm() { podman --root "$WORK/storage" --runroot "$RUN/storage" --storage-driver overlay "$@"; }

cleanup() {
    pm rm -f -t 0 "$C1" "$C2" "$C3" "$C4" >/dev/null 2>&1 || true
    pm volume rm -f "$VOLUME" "$BACKUP_VOLUME" >/dev/null 2>&1 || true
}
trap cleanup EXIT
cleanup

# --- 1. the base image --------------------------------------------------------
# The Debian archive entries apt uses here ("URL suite"), from apt's own view of
# its sources (works for sources.list and deb822 .sources alike).
debian_sources() {
    apt-cache policy | awk -v arch="$(dpkg --print-architecture)" '
        $3 ~ /^bookworm(-updates|-security)?\/main$/ && $4 == arch {
            split($3, s, "/"); print $2, s[1] }' | sort -u
}

make_base() {
    local srcs mirror root="$WORK/rootfs"
    srcs=$(debian_sources)
    mirror=$(awk '$2 == "bookworm" { print $1; exit }' <<<"$srcs")
    [ -n "$mirror" ] || fail "no bookworm main source in apt's sources (apt-get update first?)"
    log "base: debootstrap --variant=minbase bookworm (from apt's mirror)"
    # --one-file-system: a debootstrap that died may have left /proc or /sys mounted in it.
    rm -rf --one-file-system "$root"
    debootstrap --variant=minbase bookworm "$root" "$mirror" >"$WORK/debootstrap.log" 2>&1 ||
        fail "debootstrap failed: see $WORK/debootstrap.log"
    # apt inside the build must reach the same mirror, with the same checks.
    awk '{ print "deb " $1 " " $2 " main" }' <<<"$srcs" >"$root/etc/apt/sources.list"
    apt-config dump | grep -E '^Acquire::(Check-Valid-Until|Check-Date|https?::Proxy) ' \
        >"$root/etc/apt/apt.conf.d/99host" || true
    # As Docker's slim image: no man pages, docs or translations from later installs.
    cat >"$root/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin \
        "$root"/var/lib/apt/lists/* "$root"/var/log/*.log "$root"/var/log/apt/*
    tar -C "$root" --numeric-owner --one-file-system -cf "$WORK/base.tar.tmp" .
    mv "$WORK/base.tar.tmp" "$WORK/base.tar"
    rm -rf --one-file-system "$root"
}

if ! pm image exists "$BASE"; then
    [ -s "$WORK/base.tar" ] || make_base
    log "base: podman import base.tar as $BASE"
    pm import -q "$WORK/base.tar" "$BASE" >/dev/null || fail "podman import failed"
fi

# --- 2. build -------------------------------------------------------------------
log "build: podman build -f docker/Dockerfile"
pm build --pull=never --network host --format docker -f docker/Dockerfile -t "$IMAGE" . \
    >"$WORK/build.log" 2>&1 || {
    tail -n 40 "$WORK/build.log" >&2
    fail "podman build failed (log: $WORK/build.log)"
}
# Older builds stay as untagged images: they are the layer cache. Drop them
# all only when the store has grown large (the next build then starts afresh).
if [ "$(du -sm "$WORK/storage" | cut -f1)" -gt "$STORE_MAX_MB" ]; then
    log "build: storage above ${STORE_MAX_MB} MB, pruning untagged images"
    pm image prune -f >/dev/null
fi
base_size=$(pm image inspect --format '{{.Size}}' "$BASE")
image_size=$(pm image inspect --format '{{.Size}}' "$IMAGE")
log "build: image $((image_size / 1000000)) MB, base $((base_size / 1000000)) MB, added $(((image_size - base_size) / 1000)) kB"
# The runtime stage cleans apt's caches itself (the debootstrapped base has no
# docker-clean): what it adds to the base stays small.
[ $((image_size - base_size)) -le $((RUNTIME_MAX_MB * 1000000)) ] ||
    fail "the image adds more than ${RUNTIME_MAX_MB} MB to the base (podman history $IMAGE)"
[ "$(pm image inspect --format '{{json .Config.Healthcheck}}' "$IMAGE")" != null ] ||
    fail "the image has no HEALTHCHECK"
# The image's Release binary is hardened (CMakeLists.txt EVENTD_HARDEN): PIE, full
# RELRO, a stack protector, _FORTIFY_SOURCE; read on the host (the image has no readelf).
pm rm -f -v "$C1" >/dev/null 2>&1 || true
pm create --name "$C1" "$IMAGE" >/dev/null || fail "podman create failed"
pm cp "$C1:/usr/local/bin/eventd" "$WORK/eventd-image" || fail "podman cp of the binary failed"
pm rm -f -v "$C1" >/dev/null # -v: the anonymous volume of its VOLUME /data
python3 tests/lint/hardening.py "$WORK/eventd-image" >/dev/null ||
    fail "the image's binary is not hardened (tests/lint/hardening.py)"

# --- 3. first container -------------------------------------------------------
pm volume create "$VOLUME" >/dev/null

# start NAME [PORT ARGS...]: runs the image on the volume ($START_VOLUME, else
# $VOLUME) with its port (8080,
# or PORT when ARGS, the command, make it listen there) published on a free
# loopback port, waits until the image's HEALTHCHECK passes; prints the address.
start() {
    local name=$1 inner=${2:-8080} port i
    shift $(($# < 2 ? $# : 2))
    # Hardened as docker/compose.yaml runs the shards: a read-only root (no
    # tmpfs either), no capability, no privilege gained.
    pm run -d --pull=never --name "$name" -v "${START_VOLUME:-$VOLUME}:/data" -p "127.0.0.1::$inner" \
        --read-only --read-only-tmpfs=false --cap-drop ALL --security-opt no-new-privileges \
        -e EVENTD_SCHED_BATCH=true "$IMAGE" "$@" \
        >/dev/null || fail "podman run $name failed"
    port=$(pm port "$name" "$inner/tcp") || fail "no published port for $name"
    for ((i = 0; i < HEALTH_WAIT_S; i++)); do
        if pm healthcheck run "$name" >/dev/null 2>&1; then
            echo "$port"
            return 0
        fi
        [ "$(pm inspect --format '{{.State.Running}}' "$name")" = true ] || break
        sleep 1
    done
    pm logs "$name" >&2 || true
    fail "$name did not become healthy within ${HEALTH_WAIT_S}s"
}

# stop NAME: podman stop, then the exit code must be 0 (a graceful shutdown).
stop() {
    local name=$1 code
    pm stop -t "$STOP_TIMEOUT_S" "$name" >/dev/null || fail "podman stop $name failed"
    code=$(pm inspect --format '{{.State.ExitCode}}' "$name")
    [ "$code" = 0 ] || {
        pm logs "$name" >&2 || true
        fail "$name exited with $code after podman stop (expected 0)"
    }
    log "$name: stopped, exit code 0"
}

log "run: $C1 on a new volume"
addr=$(start "$C1")
log "$C1: healthy, listening on $addr"
log1=$(pm logs "$C1" 2>&1)
grep -q '/data/demo-user.key' <<<"$log1" || fail "$C1's log does not point to /data/demo-user.key"
# EVENTD_SCHED_BATCH=true, as docker/compose.yaml sets it: the container's
# seccomp profile lets it through.
grep -q 'scheduling batch)' <<<"$log1" || fail "$C1 does not run under SCHED_BATCH (its log: no 'scheduling batch')"
# The key never appears in the log; it is in the volume, readable by uid 10001 only.
mnt=$(pm volume inspect --format '{{.Mountpoint}}' "$VOLUME")
key=$(cat "$mnt/demo-user.key") || fail "no demo-user.key in the volume"
[ -n "$key" ] || fail "empty demo-user.key"
if grep -qF "$key" <<<"$log1"; then fail "the demo key appears in the container log"; fi
[ "$(stat -c '%a %u' "$mnt/demo-user.key")" = "600 10001" ] || fail "demo-user.key is not 0600 uid 10001"

python3 tests/docker/records.py create "http://$addr" "$key" "$WORK/records.json" ||
    fail "creating records through $addr failed"
# A backup while it serves, as docker/README.md says to make one.
pm exec "$C1" eventd backup /data/backup.log >"$WORK/backup.out" ||
    fail "eventd backup in $C1 failed"
grep -q '^backed up /data/eventd.log to /data/backup.log: ' "$WORK/backup.out" ||
    fail "eventd backup said: $(cat "$WORK/backup.out")"
[ "$(stat -c '%a %u' "$mnt/backup.log")" = "600 10001" ] || fail "backup.log is not 0600 uid 10001"
stop "$C1"

# --- 4. second container, same volume ------------------------------------------
log "run: $C2 on the same volume"
addr=$(start "$C2")
log "$C2: healthy, listening on $addr"
python3 tests/docker/records.py check "http://$addr" "$key" "$WORK/records.json" ||
    fail "reading the records back through $addr failed"
stop "$C2"

# --- 5. a third, listening where its command says ------------------------------
# The HEALTHCHECK finds the port in eventd's own --listen (it probed 8080,
# EVENTD_LISTEN's default, and called such a container unhealthy forever).
log "run: $C3 with the command 'serve --listen 0.0.0.0:9090'"
addr=$(start "$C3" 9090 serve --listen 0.0.0.0:9090)
log "$C3: healthy, listening on $addr"
python3 tests/docker/records.py check "http://$addr" "$key" "$WORK/records.json" ||
    fail "reading the records back through $addr failed"
stop "$C3"

# --- 6. a fourth, on a volume holding only the backup ----------------------------
pm volume create "$BACKUP_VOLUME" >/dev/null
bmnt=$(pm volume inspect --format '{{.Mountpoint}}' "$BACKUP_VOLUME")
install -o 10001 -g 10001 -m 0600 "$mnt/backup.log" "$bmnt/eventd.log"
chown 10001:10001 "$bmnt"
log "run: $C4 on a new volume holding only the backup"
addr=$(START_VOLUME=$BACKUP_VOLUME start "$C4")
log "$C4: healthy, listening on $addr"
python3 tests/docker/records.py check "http://$addr" "$key" "$WORK/records.json" ||
    fail "reading the records back from the backup through $addr failed"
stop "$C4"
log "passed"
