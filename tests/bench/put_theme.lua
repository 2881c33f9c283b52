-- wrk script: authenticated PUT /v2/theme/:id (partial update) cycling over
-- themes created beforehand, whose ids come from EVENTD_IDS ("2,3,4") or
-- EVENTD_IDS_FILE (one a line; run.sh seeds them with post_theme.lua).
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local bench = require("bench_common")

local base = os.getenv("EVENTD_BASE_PATH") or "/v2"
local ids = bench.ids()
local STATUSES = { "active", "draft", "archived" }

-- One pre-formatted request per id (at most 4096: the cycle is long enough
-- that consecutive updates touch different records).
bench.install("put_theme", math.min(#ids, 4096), function(i)
    local body = string.format('{"Theme":{"Name":"Updated theme %d","HeaderBackgroundRGB":"%s",'
        .. '"TextHeadingsRGB":"%s","Status":"%s"}}', i, bench.color(i), bench.color(i + 7),
        STATUSES[i % #STATUSES + 1])
    return wrk.format("PUT", base .. "/theme/" .. ids[i], bench.headers(), body)
end)
