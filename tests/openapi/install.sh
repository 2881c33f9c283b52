#!/bin/sh
# Installs Redocly CLI for the OpenAPI lint (ctest lint.openapi) into
# tests/openapi/node_modules, exactly as package-lock.json pins it (npm ci, from
# the npm registry that npm is configured with). Idempotent: when the pinned
# version is already there it only checks.
set -eu
cd "$(dirname "$0")"
want=$(node -p "require('./package-lock.json').packages['node_modules/@redocly/cli'].version")
have=$(node -p "try { require('./node_modules/@redocly/cli/package.json').version } catch (e) { '' }")
if [ "$have" = "$want" ]; then
    echo "openapi lint: @redocly/cli $have present"
    exit 0
fi
echo "openapi lint: installing @redocly/cli $want (npm ci)"
npm ci --no-audit --no-fund --loglevel=error
