-- bench_common: what the wrk scripts in tests/bench/ share.
--
--   * credentials from EVENTD_USER (default "bench") and EVENTD_KEY, turned
--     into an HTTP Basic header by a small base64 encoder (wrk's LuaJIT has none);
--   * a pool of pre-formatted requests, so request() is a table lookup and
--     the client spends its CPU on sockets, not on string building;
--   * a response() hook counting non-2xx answers (wrk itself only counts
--     status > 399), remembering the last one for diagnosis;
--   * a done() hook that prints one "BENCH key=value ..." line that
--     tests/bench/run.sh parses, after a human-readable summary.
--
-- Optional environment:
--   EVENTD_BENCH_MAX  stop after this many responses (seeding, filling a log)
--   EVENTD_IDS_OUT    append the "ID" of every 2xx response body to this file
--                     (flushed every 1000 ids, so a caller can watch it grow);
--                     a line "#done" ends it when EVENTD_BENCH_MAX is reached,
--                     "#error STATUS BODY" at the first non-2xx answer
--   EVENTD_BODY_OUT   write the first 2xx response body to this file
--   EVENTD_IDS_FILE   ids, one a line, for scripts addressing existing records
--   EVENTD_IDS        the same as a comma-separated list (wins over the file)
--
-- wrk runs setup() and done() in one Lua state and every thread's init(),
-- request() and response() in states of their own: counters cross over with
-- thread:get(), which is why they are globals.

local M = {}

local ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

-- RFC 4648 base64 with padding. Plain arithmetic, no bit library needed.
function M.base64(s)
    local out = {}
    for i = 1, #s, 3 do
        local a, b, c = s:byte(i, i + 2)
        local n = a * 65536 + (b or 0) * 256 + (c or 0)
        local q1 = math.floor(n / 262144) % 64
        local q2 = math.floor(n / 4096) % 64
        local q3 = math.floor(n / 64) % 64
        local q4 = n % 64
        out[#out + 1] = ALPHABET:sub(q1 + 1, q1 + 1) .. ALPHABET:sub(q2 + 1, q2 + 1)
            .. (b and ALPHABET:sub(q3 + 1, q3 + 1) or "=")
            .. (c and ALPHABET:sub(q4 + 1, q4 + 1) or "=")
    end
    return table.concat(out)
end

-- Headers every request carries: authentication and a JSON body type.
function M.headers(extra)
    local user = os.getenv("EVENTD_USER") or "bench"
    local key = os.getenv("EVENTD_KEY")
    if not key or key == "" then
        error("EVENTD_KEY is not set (the API key of EVENTD_USER)")
    end
    local h = {
        ["Authorization"] = "Basic " .. M.base64(user .. ":" .. key),
        ["Content-Type"] = "application/json",
    }
    for k, v in pairs(extra or {}) do h[k] = v end
    return h
end

-- Ids of existing records, from EVENTD_IDS or EVENTD_IDS_FILE.
function M.ids()
    local ids = {}
    local list = os.getenv("EVENTD_IDS")
    if list and list ~= "" then
        for id in list:gmatch("%d+") do ids[#ids + 1] = id end
    else
        local path = os.getenv("EVENTD_IDS_FILE")
        if not path then error("set EVENTD_IDS or EVENTD_IDS_FILE to the ids to use") end
        local f = assert(io.open(path, "r"))
        for line in f:lines() do
            local id = line:match("^%s*(%d+)")
            if id then ids[#ids + 1] = id end
        end
        f:close()
    end
    if #ids == 0 then error("no ids given (EVENTD_IDS / EVENTD_IDS_FILE)") end
    return ids
end

-- A colour that changes with i, six hex digits as eventd wants them.
function M.color(i)
    return string.format("%06x", (i * 2654435761) % 16777216)
end

-- Installs the wrk globals. name labels the result line; build(i) returns the
-- i-th request string of the pool (called for i = 1..pool in each thread).
function M.install(name, pool, build)
    local threads = {}

    function setup(thread)
        threads[#threads + 1] = thread
    end

    function init(args)
        non2xx, responses, last_bad = 0, 0, ""
        reqs, nreqs, cursor = {}, pool, 0
        for i = 1, pool do reqs[i] = build(i) end
        max_responses = tonumber(os.getenv("EVENTD_BENCH_MAX") or "")
        local out = os.getenv("EVENTD_IDS_OUT")
        ids_out = out and out ~= "" and assert(io.open(out, "a")) or nil
        body_out = os.getenv("EVENTD_BODY_OUT")
        if body_out == "" then body_out = nil end
    end

    function request()
        cursor = cursor % nreqs + 1
        return reqs[cursor]
    end

    function response(status, headers, body)
        responses = responses + 1
        if status < 200 or status > 299 then
            non2xx = non2xx + 1
            last_bad = status .. " " .. (body or ""):sub(1, 200)
            if ids_out then -- seeding cannot go on: say so where the caller looks
                ids_out:write("#error ", last_bad:gsub("\n", " "), "\n")
                ids_out:flush()
                wrk.thread:stop()
                return
            end
        else
            if ids_out then
                local id = body and body:match('"ID":(%d+)')
                if id then ids_out:write(id, "\n") end
                if responses % 1000 == 0 then ids_out:flush() end
            end
            if body_out then
                local f = assert(io.open(body_out, "w"))
                f:write(body or "")
                f:close()
                body_out = nil
            end
        end
        if max_responses and responses >= max_responses then
            if ids_out then
                ids_out:write("#done\n")
                ids_out:flush()
            end
            wrk.thread:stop()
        end
    end

    function done(summary, latency, requests)
        local bad, last = 0, ""
        for _, t in ipairs(threads) do
            bad = bad + (t:get("non2xx") or 0)
            local l = t:get("last_bad")
            if l and l ~= "" then last = l end
        end
        local secs = summary.duration / 1e6
        local rps = secs > 0 and summary.requests / secs or 0
        local e = summary.errors
        io.write(string.format("%s: %d requests in %.2fs, %.0f req/s, p50 %.0fus p99 %.0fus, non-2xx %d\n",
            name, summary.requests, secs, rps, latency:percentile(50), latency:percentile(99), bad))
        if last ~= "" then io.write("last non-2xx: ", last, "\n") end
        io.write(string.format(
            "BENCH op=%s requests=%d duration_us=%d rps=%.1f p50_us=%.0f p99_us=%.0f max_us=%.0f "
                .. "non2xx=%d err_connect=%d err_read=%d err_write=%d err_timeout=%d\n",
            name, summary.requests, summary.duration, rps, latency:percentile(50),
            latency:percentile(99), latency.max, bad, e.connect, e.read, e.write, e.timeout))
    end
end

return M
