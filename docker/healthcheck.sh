#!/bin/bash
# eventd-healthcheck: exit 0 when eventd answers GET /healthz with 200.
# The image has no curl; bash's /dev/tcp is enough for one HTTP/1.0 request.
# The port is taken from EVENTD_LISTEN (HOST:PORT), as eventd itself does;
# the check always connects to the loopback address.
port=${EVENTD_LISTEN:-0.0.0.0:8080}
port=${port##*:}
{ exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || {
    echo "unhealthy: nothing listens on 127.0.0.1:$port"
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
