#!/bin/sh
# Installs playwright-core for the browser test into tests/browser/node_modules,
# exactly as package-lock.json pins it (npm ci, from the npm registry that npm
# is configured with). Idempotent: when the pinned version is already there it
# only checks. The browser itself is Debian's chromium (deps/install.sh), never
# a download of playwright's own.
set -eu
cd "$(dirname "$0")"
want=$(node -p "require('./package-lock.json').packages['node_modules/playwright-core'].version")
have=$(node -p "try { require('./node_modules/playwright-core/package.json').version } catch (e) { '' }")
if [ "$have" = "$want" ]; then
    echo "browser test: playwright-core $have present"
    exit 0
fi
echo "browser test: installing playwright-core $want (npm ci)"
# PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: playwright-core downloads nothing, but say so.
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
