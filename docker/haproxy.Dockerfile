# syntax=docker/dockerfile:1
#
# HAProxy from Debian 12 (2.6, the version docker/haproxy.cfg is checked with:
# haproxy -c -f docker/haproxy.cfg), run as the unprivileged "haproxy" user
# that the package creates, plus socat to talk to its runtime API socket
# (drain a server, show its state), and shards.map. compose.yaml mounts the
# configuration (and the map, so that a new map needs no rebuild).
#
#   docker build -f docker/haproxy.Dockerfile -t eventd-lb docker

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends haproxy socat \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o haproxy -g haproxy -m 0750 /run/haproxy
# The shards' ring (docker/shardmap.py), next to where haproxy.cfg is mounted
# (about 1 MB for three shards: too large for a Kubernetes ConfigMap, so it is part of the image).
COPY shards.map /etc/haproxy/shards.map
USER haproxy
EXPOSE 8080
# -W master-worker, -db stay in the foreground. SIGUSR1 is HAProxy's soft
# stop: stop listening, let connections finish (bounded by hard-stop-after).
STOPSIGNAL SIGUSR1
CMD ["haproxy", "-W", "-db", "-f", "/etc/haproxy/haproxy.cfg"]
