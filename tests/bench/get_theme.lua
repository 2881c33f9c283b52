-- wrk script: authenticated GET /v2/theme/:id cycling over existing themes
-- (EVENTD_IDS or EVENTD_IDS_FILE, as for put_theme.lua).
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local bench = require("bench_common")

local base = os.getenv("EVENTD_BASE_PATH") or "/v2"
local ids = bench.ids()

bench.install("get_theme", math.min(#ids, 4096), function(i)
    local h = bench.headers()
    h["Content-Type"] = nil
    return wrk.format("GET", base .. "/theme/" .. ids[i], h, nil)
end)
