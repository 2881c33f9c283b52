-- wrk script: authenticated POST /v2/address (create a venue with map
-- coordinates), the second write path of the API.
package.path = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "?.lua;" .. package.path
local bench = require("bench_common")

local base = os.getenv("EVENTD_BASE_PATH") or "/v2"
local CITIES = { { "Berlin", "BE", "DE", "10117", 13.3889, 52.5170 },
    { "Lyon", "ARA", "FR", "69002", 4.8357, 45.7640 },
    { "Leeds", "WYK", "GB", "LS1 4AP", -1.5491, 53.8008 },
    { "Porto", "13", "PT", "4050-253", -8.6291, 41.1579 } }

bench.install("post_address", 64, function(i)
    local c = CITIES[(i - 1) % #CITIES + 1]
    local body = string.format(
        '{"Address":{"Name":"Venue %d","Line1":"%d Market Street","Line2":"Hall %d","Line3":"",'
            .. '"City":"%s","State":"%s","Country":"%s","Post":"%s","Lon":%.4f,"Lat":%.4f,'
            .. '"ShowMap":%s,"Status":"active"}}',
        i, 10 + i, i % 5 + 1, c[1], c[2], c[3], c[4], c[5] + i / 1000, c[6] - i / 1000,
        i % 2 == 0 and "true" or "false")
    return wrk.format("POST", base .. "/address", bench.headers({ ["Cache-Control"] = "no-cache" }),
        body)
end)
