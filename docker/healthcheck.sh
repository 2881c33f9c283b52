#!/bin/bash
# eventd-healthcheck: exit 0 when eventd answers GET /healthz with 200.
# The image has no curl; bash's /dev/tcp is enough for one HTTP/1.0 request.
#
# The address is eventd's own: the last --listen of its command line (PID 1,
# as the image's entrypoint runs it, or else the first eventd serving, as under
# an init such as docker run --init), else EVENTD_LISTEN, else eventd's
# default 0.0.0.0:8080, read as eventd reads them. eventd serves when its first
# argument is "serve" or a flag, or when it has none: serve is its default
# command, so "docker run IMAGE --listen ..." replaces the image's "serve" with
# settings only. A wildcard host (0.0.0.0, ::) is checked on the loopback
# address, any other on itself.
listen=
for cmdline in /proc/1/cmdline /proc/[0-9]*/cmdline; do
    mapfile -d '' -t argv <"$cmdline" 2>/dev/null || continue
    [[ ${argv[0]##*/} == eventd && (${#argv[@]} -eq 1 || ${argv[1]} == serve || ${argv[1]} == -*) ]] ||
        continue
    for ((i = 1; i < ${#argv[@]}; i++)); do
        case ${argv[i]} in
        --listen=*) listen=${argv[i]#--listen=} ;;
        --listen) listen=${argv[i + 1]-} ;;
        esac
    done
    break
done
listen=${listen:-${EVENTD_LISTEN:-0.0.0.0:8080}}
port=${listen##*:}
host=${listen%:*}
host=${host#[}
host=${host%]}
case $host in
0.0.0.0 | :: | "") host=127.0.0.1 ;;
esac
{ exec 3<>"/dev/tcp/$host/$port"; } 2>/dev/null || {
    echo "unhealthy: nothing listens on $host port $port"
    exit 1
}
printf 'GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
IFS= read -r -t 2 status <&3 || {
    echo "unhealthy: no answer within 2 s"
    exit 1
}
case $status in
"HTTP/1."?" 200 "*) exit 0 ;;
*)
    echo "unhealthy: ${status%$'\r'}"
    exit 1
    ;;
esac
