-- wrk script of tests/lb/test_lb.py and tests/bench/lb_shards.py: GET and
-- PUT /v2/theme/:id of many users, alternating, through the balancer.
-- EVENTD_LB_OPS=get or put keeps only that method (default: both).
--
-- EVENTD_LB_REQUESTS names a file with one line per user:
--   BASIC_CREDENTIALS THEME_ID
-- (the base64 of "name:key", and one theme of that user). Every request is
-- formatted once in init(); request() is a table lookup. Each thread starts
-- at its own offset so threads do not move in step.
local pool = {}
local next_i = 1
local threads = 0

function setup(thread)
    threads = threads + 1
    thread:set("id", threads)
end

function init(args)
    local path = os.getenv("EVENTD_LB_REQUESTS")
    local ops = os.getenv("EVENTD_LB_OPS") or "both"
    local f = assert(io.open(path, "r"), "cannot open " .. tostring(path))
    for line in f:lines() do
        local cred, id = line:match("^(%S+)%s+(%d+)$")
        if cred then
            local h = { ["Authorization"] = "Basic " .. cred, ["Content-Type"] = "application/json" }
            if ops ~= "put" then
                pool[#pool + 1] = wrk.format("GET", "/v2/theme/" .. id, h)
            end
            if ops ~= "get" then
                local body = string.format('{"Theme":{"Name":"lb %d","Status":"active"}}', #pool)
                pool[#pool + 1] = wrk.format("PUT", "/v2/theme/" .. id, h, body)
            end
        end
    end
    f:close()
    assert(#pool > 0, "no requests in " .. path)
    next_i = ((wrk.thread:get("id") or 1) * 7919) % #pool + 1
end

function request()
    local r = pool[next_i]
    next_i = next_i % #pool + 1
    return r
end
