-- wrk script: authenticated DELETE /v2/theme/:id of themes created beforehand,
-- each once, whose ids come from EVENTD_IDS ("2,3,4") or EVENTD_IDS_FILE (one a
-- line); run with EVENTD_BENCH_MAX at most the number of ids (key_rss.sh).
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local bench = require("bench_common")

local base = os.getenv("EVENTD_BASE_PATH") or "/v2"
local ids = bench.ids()

bench.install("delete_theme", #ids, function(i)
    return wrk.format("DELETE", base .. "/theme/" .. ids[i], bench.headers(), nil)
end)
