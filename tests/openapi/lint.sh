#!/bin/sh
# Lints docs/openapi.json with the pinned Redocly CLI (tests/openapi/install.sh)
# and redocly.yaml beside this file. A missing redocly fails: it does not skip.
# Redocly also checks for a newer release and sends usage data unless told not to.
set -eu
cd "$(dirname "$0")"
bin=./node_modules/.bin/redocly
if [ ! -x "$bin" ]; then
    echo "lint.openapi: $bin is missing: run deps/install.sh (or tests/openapi/install.sh)" >&2
    exit 1
fi
REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true exec "$bin" lint --config redocly.yaml \
    ../../docs/openapi.json
