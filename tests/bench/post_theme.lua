-- wrk script: authenticated POST /v2/theme (create), the call the site makes
-- most. Usage (see run.sh):
--   EVENTD_KEY=... wrk -t1 -c64 -d10s --latency -s tests/bench/post_theme.lua http://127.0.0.1:PORT
-- EVENTD_BASE_PATH overrides "/v2"; EVENTD_IDS_OUT collects the created ids.
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local bench = require("bench_common")

local base = os.getenv("EVENTD_BASE_PATH") or "/v2"
local NAMES = { "Spring Gala", "Annual Conference 2026", "Board Meeting", "Summer Fête",
    "Product Launch", "Charity Run", "Team Offsite", "Winter Ball" }

bench.install("post_theme", 64, function(i)
    local body = string.format(
        '{"Theme":{"Name":"%s #%d","PageBackgroundRGB":"%s","HeaderBackgroundRGB":"%s",'
            .. '"HeaderTextRGB":"575757","TextHeadingsRGB":"%s","SmallHeadingRGB":"575757",'
            .. '"Status":"active"}}',
        NAMES[(i - 1) % #NAMES + 1], i, bench.color(i), bench.color(i + 1), bench.color(i + 2))
    return wrk.format("POST", base .. "/theme", bench.headers({ ["Cache-Control"] = "no-cache" }), body)
end)
