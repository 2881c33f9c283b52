-- wrk script of tests/bench/lb_compare.sh: one operation of many users, so
-- that a balancer spreads them over its shards.
--   EVENTD_LB_REQUESTS  a file with one line per user: BASIC_CREDENTIALS THEME_ID
--                       (the base64 of "name:key", and one theme of that user)
--   EVENTD_LB_OPS       get (GET /v2/theme/:id), put (PUT /v2/theme/:id),
--                       post (POST /v2/theme), post_key (POST /v2/theme with an
--                       Idempotency-Key of its own: formatted per request),
--                       post_nonce (post_key's requests, formatted the same way,
--                       with the same value under a header nobody reads,
--                       X-Bench-Nonce-K: post_key's control, so that the
--                       key's price is not mixed with the client's extra work)
-- Prints bench_common's "BENCH ..." line.
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local bench = require("bench_common")

local op = os.getenv("EVENTD_LB_OPS") or "get"
local users = {}
local f = assert(io.open(os.getenv("EVENTD_LB_REQUESTS") or "", "r"), "EVENTD_LB_REQUESTS")
for line in f:lines() do
    local cred, id = line:match("^(%S+)%s+(%d+)$")
    if cred then users[#users + 1] = { cred = cred, id = id } end
end
f:close()
assert(#users > 0, "no users in EVENTD_LB_REQUESTS")

local function headers(u)
    return { ["Authorization"] = "Basic " .. u.cred, ["Content-Type"] = "application/json" }
end

local function body(i)
    return string.format('{"Theme":{"Name":"lb %d","PageBackgroundRGB":"%s"}}', i, bench.color(i))
end

bench.install("lb_" .. op, #users, function(i)
    local u = users[(i * 7919) % #users + 1]
    if op == "get" then
        local h = headers(u)
        h["Content-Type"] = nil
        return wrk.format("GET", "/v2/theme/" .. u.id, h, nil)
    elseif op == "put" then
        return wrk.format("PUT", "/v2/theme/" .. u.id, headers(u), body(i))
    end
    return wrk.format("POST", "/v2/theme", headers(u), body(i))
end)

if op == "post_key" or op == "post_nonce" then
    -- Every request a key never used before (this run's start time and a counter);
    -- post_nonce: the same bytes under a name of the same length nobody reads.
    local name = op == "post_key" and "Idempotency-Key" or "X-Bench-Nonce-K"
    local pooled = request
    local seq, prefix = 0, nil
    request = function()
        pooled() -- keeps bench_common's cursor moving
        if not prefix then
            math.randomseed(os.time())
            prefix = string.format("b%d-%d-", os.time(), math.random(1, 1000000000))
        end
        seq = seq + 1
        local u = users[seq % #users + 1]
        local h = headers(u)
        h[name] = prefix .. seq
        return wrk.format("POST", "/v2/theme", h, body(seq))
    end
end
