-- wrk script: post_theme.lua with an Idempotency-Key on every request, each
-- key new (a counter behind a per-run, per-thread prefix), so every request
-- creates a record and stores its key: the price of the key next to
-- post_theme.lua's. Usage as post_theme.lua.
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local bench = require("bench_common")

local base = os.getenv("EVENTD_BASE_PATH") or "/v2"

bench.install("post_theme_keyed", 64, function(i)
    local body = string.format(
        '{"Theme":{"Name":"Keyed #%d","PageBackgroundRGB":"%s","HeaderBackgroundRGB":"%s",'
            .. '"HeaderTextRGB":"575757","TextHeadingsRGB":"%s","SmallHeadingRGB":"575757",'
            .. '"Status":"active"}}',
        i, bench.color(i), bench.color(i + 1), bench.color(i + 2))
    return wrk.format("POST", base .. "/theme", bench.headers({ ["Cache-Control"] = "no-cache" }), body)
end)

local sent = 0
local prefix = nil

-- The pool's request with its own key after the request line.
function request()
    if not prefix then prefix = string.format("%x-%s", os.time(), tostring({}):sub(8)) end
    sent = sent + 1
    cursor = cursor % nreqs + 1
    return (reqs[cursor]:gsub("\r\n", "\r\nIdempotency-Key: " .. prefix .. "-" .. sent .. "\r\n", 1))
end
