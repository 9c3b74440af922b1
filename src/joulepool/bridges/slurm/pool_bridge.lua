--[[
pool_bridge.lua, the joulepool Slurm bridge as a Lua module: before a job exists, ask
`pool serve` whether its claim may start (pool/1 §4; API.md POST /v1/claims).

A site's job_submit.lua calls it in one line (docs/slurm.md, "Chaining"):

  package.path = "/etc/slurm/?.lua;" .. package.path
  local pool_bridge = require("pool_bridge")
  function slurm_job_submit(job_desc, part_list, submit_uid)
    -- the site's own rules first, then:
    return pool_bridge.job_submit(job_desc, part_list, submit_uid)
  end
  function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return pool_bridge.job_modify(job_desc, job_rec, part_list, modify_uid)
  end

  Admit -> the job goes on (admin comment records the claim, state=admitted)
  Deny  -> rejected; the submitter sees Pool's reason
  Queue -> held (priority 0), reason in the admin comment; `pool slurm agent` turns the hold
           into an administrator's hold (JobHeldAdmin) and releases it once Pool admits it
  Pool unreachable -> held (fail-closed), or let through unaccounted when the configuration
           says on_unreachable = "admit" (fail-open)

The claim id is made here, before Slurm has a job id: slurm-<cluster>-<random uuid>. It is
written into the job's admin comment, which only administrators can change, so the agent
and the epilog find the same claim whatever the user later does to the job.

Runs inside slurmctld as SlurmUser, while slurmctld holds its job lock: every call to Pool
has one total deadline (timeout_ms, default 500 ms), never more. Figures stay strings of
digits from the comment to the JSON: Lua 5.1 numbers are doubles, and microjoules are
integers (DESIGN.md §2).
]]

-- `pool slurm install-config` rewrites this line to the installed configuration's path.
local CONFIG_PATH = "/etc/slurm/pool-bridge.toml"

local M = {}

local NO_VAL = 4294967294
local NO_VAL16 = 65534
local SAFE = "^[%w_%.:@%+/%-]+$"

local DENY_TEXT = {
  unknown_entitlement = "the pool holds no entitlement of that name",
  empty_gang = "a gang of no members, or of members with no devices, claims nothing",
  devices_exceed_guarantee = "it asks for more devices than the entitlement is ever guaranteed; devices never borrow",
  energy_exceeds_limit = "its estimate exceeds the entitlement's hard limit",
  unobserved_cannot_borrow = "its estimate is a guess (Estimator) larger than the whole guarantee, and a guess may never borrow; measure the work to earn an observed estimate",
  weight_zero_cannot_borrow = "its estimate is larger than the whole guarantee and the entitlement has no over-quota weight to borrow with",
  exceeds_weighted_share = "even with every sibling's guarantee unspent, the part it must borrow exceeds its weighted share",
}
local QUEUE_TEXT = {
  devices_held = "the entitlement's devices are held by running claims; it fits once some are released",
  guarantee_exhausted_may_not_borrow = "the guarantee is spent and this estimate may not borrow (a guess, or no over-quota weight); it fits after a release",
  limit_reached = "admitting it now would pass the entitlement's hard limit",
  surplus_insufficient = "the siblings' unspent surplus, or this entitlement's weighted share of it, is too small right now",
}

-- ---------------------------------------------------------------------------------------
-- configuration: the TOML subset `pool slurm check-config` guarantees (sections, quoted or
-- bare keys, "strings" without escapes, integers, comments)

local function read_config(path)
  local fh, err = io.open(path, "r")
  if not fh then
    return nil, "cannot read " .. path .. ": " .. tostring(err)
  end
  local cfg = {
    pool = {}, accounts = {}, default_estimate = {}, account_estimate = {},
    partition_estimate = {}, exempt_accounts = {}, exempt_partitions = {},
  }
  local section = nil
  local n = 0
  for line in fh:lines() do
    n = n + 1
    local s = line:gsub("^%s+", ""):gsub("%s+$", "")
    if s ~= "" and s:sub(1, 1) ~= "#" then
      local name = s:match("^%[([%w_]+)%]$")
      if name then
        section = cfg[name]
        if section == nil then
          fh:close()
          return nil, path .. ":" .. n .. ": unknown table [" .. name .. "]"
        end
      else
        local key, rest = s:match('^"([^"]+)"%s*=%s*(.-)$')
        if not key then
          key, rest = s:match("^([%w_%-]+)%s*=%s*(.-)$")
        end
        if not key or section == nil then
          fh:close()
          return nil, path .. ":" .. n .. ": not understood"
        end
        rest = rest:gsub("%s+#.*$", "")
        local value = rest:match('^"([^"\\]*)"$') or rest:match("^(%d+)$")
        if value == nil then
          value = ({ ["true"] = true, ["false"] = false })[rest]
        end
        if value == nil then
          fh:close()
          return nil, path .. ":" .. n .. ": value of " .. key .. " not understood"
        end
        section[key] = value
      end
    end
  end
  fh:close()
  local p = cfg.pool
  if type(p.url) ~= "string" or type(p.token_file) ~= "string" then
    return nil, path .. ": [pool] needs url and token_file"
  end
  local scheme
  scheme, p.host, p.port = p.url:match("^(https?)://([^:/]+):(%d+)/?$")
  if not p.host then
    scheme, p.host = p.url:match("^(https?)://([^:/]+)/?$")
    p.port = scheme == "https" and "443" or "80"
  end
  if not p.host then
    return nil, path .. ": [pool] url must be http(s)://host[:port]"
  end
  -- https: the certificate is verified against ca_file (the system's CAs by default).
  p.tls = scheme == "https"
  -- The bearer token rides on every request: over the network only inside TLS.
  if not p.tls and not (p.host == "localhost" or p.host:match("^127%.%d+%.%d+%.%d+$")) then
    return nil, path .. ": [pool] url: http:// would send the token in clear; use https:// "
      .. "(plain http only to 127.0.0.1 or localhost)"
  end
  p.ca_file = p.ca_file or "/etc/ssl/certs/ca-certificates.crt"
  p.timeout = tonumber(p.timeout_ms or "500") / 1000
  p.fail_open = (p.on_unreachable == "admit")
  p.cluster = p.cluster or "slurm"
  p.mode = p.mode or "enforce"
  if p.mode ~= "enforce" and p.mode ~= "shadow" then
    return nil, path .. ': [pool] mode must be "enforce" or "shadow"'
  end
  p.cpu_only = p.cpu_only or "claim"
  if p.cpu_only ~= "claim" and p.cpu_only ~= "exempt" then
    return nil, path .. ': [pool] cpu_only must be "claim" or "exempt"'
  end
  -- The cluster is part of every claim id, which has no '/' and at most 256 bytes (API.md).
  if #p.cluster > 64 or not p.cluster:match("^[%w_%.:@%+%-]+$") then
    return nil, path .. ": [pool] cluster: 1 to 64 letters, digits and _.:@+- (no '/')"
  end
  return cfg
end

local function read_token(path)
  local fh = io.open(path, "r")
  if not fh then
    return nil
  end
  local token = (fh:read("*l") or ""):gsub("%s+", "")
  fh:close()
  if token == "" then
    return nil
  end
  return token
end

local function new_uuid()
  local fh = io.open("/proc/sys/kernel/random/uuid", "r")
  if fh then
    local u = fh:read("*l")
    fh:close()
    if u and u:match("^[%x%-]+$") then
      return u
    end
  end
  -- No /proc: time and a counter still make an id this controller never repeats.
  _G.pool_seq = (_G.pool_seq or 0) + 1
  return string.format("%d-%d-%d", os.time(), math.random(1, 2147483646), _G.pool_seq)
end

-- ---------------------------------------------------------------------------------------
-- JSON: just what the API's answers use. Numbers stay strings of digits.

local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    return string.format("\\u%04x", c:byte())
  end) .. '"'
end

local decode_value

local function skip(s, i)
  return s:find("[^%s]", i) or #s + 1
end

local function decode_string(s, i)
  local out, j = {}, i + 1
  while true do
    local c = s:sub(j, j)
    if c == "" then
      error("unterminated string")
    elseif c == '"' then
      return table.concat(out), j + 1
    elseif c == "\\" then
      local e = s:sub(j + 1, j + 1)
      local map = { n = "\n", t = "\t", r = "\r", b = "\b", f = "\f" }
      if e == "u" then
        local code = tonumber(s:sub(j + 2, j + 5), 16) or 63
        out[#out + 1] = code < 128 and string.char(code) or "?"
        j = j + 6
      else
        out[#out + 1] = map[e] or e
        j = j + 2
      end
    else
      out[#out + 1] = c
      j = j + 1
    end
  end
end

decode_value = function(s, i)
  i = skip(s, i)
  local c = s:sub(i, i)
  if c == "{" then
    local obj = {}
    i = skip(s, i + 1)
    if s:sub(i, i) == "}" then
      return obj, i + 1
    end
    while true do
      local key
      key, i = decode_string(s, skip(s, i))
      i = skip(s, i)
      if s:sub(i, i) ~= ":" then
        error("expected ':'")
      end
      obj[key], i = decode_value(s, i + 1)
      i = skip(s, i)
      local d = s:sub(i, i)
      if d == "}" then
        return obj, i + 1
      elseif d ~= "," then
        error("expected ',' or '}'")
      end
      i = i + 1
    end
  elseif c == "[" then
    local arr = {}
    i = skip(s, i + 1)
    if s:sub(i, i) == "]" then
      return arr, i + 1
    end
    while true do
      arr[#arr + 1], i = decode_value(s, i)
      i = skip(s, i)
      local d = s:sub(i, i)
      if d == "]" then
        return arr, i + 1
      elseif d ~= "," then
        error("expected ',' or ']'")
      end
      i = i + 1
    end
  elseif c == '"' then
    return decode_string(s, i)
  end
  local lit = s:match("^-?[%d%.eE+%-]+", i)
  if lit then
    return lit, i + #lit
  end
  for word, value in pairs({ ["true"] = true, ["false"] = false, ["null"] = "null" }) do
    if s:sub(i, i + #word - 1) == word then
      return value, i + #word
    end
  end
  error("unexpected character at " .. i)
end

local function json_decode(s)
  local ok, value = pcall(decode_value, s, 1)
  if ok and type(value) == "table" then
    return value
  end
  return nil
end

-- ---------------------------------------------------------------------------------------
-- HTTP/1.0 over LuaSocket (and LuaSec for https) with one deadline for the whole exchange

-- Whether the server's certificate names `host` in its subjectAltName, exactly (a DNS name
-- or an IP address; no wildcards): LuaSec checks the chain, not the name.
local function names_host(cert, host)
  if cert == nil then
    return false
  end
  local ok, ext = pcall(cert.extensions, cert)
  local san = ok and ext and ext["2.5.29.17"]
  if type(san) ~= "table" then
    return false
  end
  for _, kind in ipairs({ "dNSName", "iPAddress" }) do
    for _, name in ipairs(san[kind] or {}) do
      if string.lower(name) == string.lower(host) then
        return true
      end
    end
  end
  return false
end

local function tls_wrap(p, conn, left)
  local ok, ssl = pcall(require, "ssl")
  if not ok then
    return nil, "lua-sec is not installed on the controller (apt-get install lua-sec)"
  end
  local wrapped, err = ssl.wrap(conn, {
    mode = "client",
    protocol = "any",
    verify = { "peer", "fail_if_no_peer_cert" },
    cafile = p.ca_file,
    options = { "all", "no_sslv2", "no_sslv3" },
  })
  if not wrapped then
    return nil, "TLS to " .. p.url .. ": " .. tostring(err)
  end
  if not p.host:match("^[%d%.]+$") and wrapped.sni then
    wrapped:sni(p.host)
  end
  wrapped:settimeout(left())
  local shook, herr = wrapped:dohandshake()
  if not shook then
    wrapped:close()
    return nil, "TLS handshake with " .. p.url .. " (" .. p.ca_file .. "): " .. tostring(herr)
  end
  if not names_host(wrapped:getpeercertificate(), p.host) then
    wrapped:close()
    return nil, "TLS: the certificate of " .. p.url .. " does not name " .. p.host
  end
  return wrapped
end

local function post(p, token, path, body)
  local ok, socket = pcall(require, "socket")
  if not ok then
    return nil, "lua-socket is not installed on the controller"
  end
  local deadline = socket.gettime() + p.timeout
  local function left()
    return math.max(0.001, deadline - socket.gettime())
  end
  local conn = socket.tcp()
  conn:settimeout(left(), "t")
  local okc, err = conn:connect(p.host, tonumber(p.port))
  if not okc then
    conn:close()
    return nil, "connect to " .. p.url .. ": " .. tostring(err)
  end
  if p.tls then
    local wrapped, terr = tls_wrap(p, conn, left)
    if not wrapped then
      conn:close()
      return nil, terr
    end
    conn = wrapped
  end
  local request = "POST " .. path .. " HTTP/1.0\r\n"
    .. "Host: " .. p.host .. "\r\n"
    .. "Authorization: Bearer " .. token .. "\r\n"
    .. "Content-Type: application/json\r\n"
    .. "Content-Length: " .. #body .. "\r\n"
    .. "Connection: close\r\n\r\n" .. body
  conn:settimeout(left(), "t")
  local sent, serr = conn:send(request)
  if not sent then
    conn:close()
    return nil, "send to " .. p.url .. ": " .. tostring(serr)
  end
  conn:settimeout(left(), "t")
  local data, rerr, partial = conn:receive("*a")
  conn:close()
  data = data or partial
  if rerr and rerr ~= "closed" then
    return nil, "no answer from " .. p.url .. " within " .. p.timeout_ms_text .. ": " .. tostring(rerr)
  end
  local status = tonumber((data or ""):match("^HTTP/%d%.%d (%d%d%d)"))
  if not status then
    return nil, "no HTTP answer from " .. p.url
  end
  local answer = json_decode(data:match("\r\n\r\n(.*)$") or "")
  if answer == nil then
    return nil, "HTTP " .. status .. " without a JSON body from " .. p.url
  end
  return status, answer
end

-- ---------------------------------------------------------------------------------------
-- the job's claim

local function set(v, none)
  return v ~= nil and v ~= none
end

local function gpus_in(tres)
  -- "gres:gpu:2", "gres:gpu:a100:2", "gres/gpu=2"; several comma-separated entries may be given
  if tres == nil then
    return nil
  end
  local total = nil
  for entry in tostring(tres):gmatch("[^,]+") do
    local count = entry:match("^gres[:/]gpu[:=](%d+)$") or entry:match("^gres[:/]gpu:[^:,]+:(%d+)$")
    if entry:match("^gres[:/]gpu") and not count then
      count = "1"
    end
    if count then
      total = (total or 0) + tonumber(count)
    end
  end
  return total
end

local function ceil_div(a, b)
  return math.floor((a + b - 1) / b)
end

-- gang_size: the job's nodes; devices_per_member: GPUs per node, or CPUs per node where the
-- job asks for no GPU (the gang's figures describe the whole gang, §2.4).
local function devices(job_desc)
  local gang = 1
  if set(job_desc.min_nodes, NO_VAL) and job_desc.min_nodes > 0 then
    gang = job_desc.min_nodes
  end
  local per_node = gpus_in(job_desc.tres_per_node)
  if per_node == nil and job_desc.tres_per_job then
    local total = gpus_in(job_desc.tres_per_job)
    if total then
      per_node = ceil_div(total, gang)
    end
  end
  if per_node == nil and job_desc.tres_per_task then
    local per_task = gpus_in(job_desc.tres_per_task)
    if per_task then
      local tasks = set(job_desc.num_tasks, NO_VAL) and job_desc.num_tasks or 1
      per_node = per_task * ceil_div(tasks, gang)
    end
  end
  if per_node ~= nil then
    return gang, per_node, "gpu"
  end
  local cpus = 1
  if set(job_desc.min_cpus, NO_VAL) and job_desc.min_cpus > 0 then
    cpus = ceil_div(job_desc.min_cpus, gang)
  end
  if set(job_desc.pn_min_cpus, NO_VAL16) and job_desc.pn_min_cpus > cpus then
    cpus = job_desc.pn_min_cpus
  end
  local per_task = set(job_desc.cpus_per_task, NO_VAL16) and job_desc.cpus_per_task or 1
  if set(job_desc.ntasks_per_node, NO_VAL16) and job_desc.ntasks_per_node * per_task > cpus then
    cpus = job_desc.ntasks_per_node * per_task
  end
  return gang, cpus, "cpu"
end

-- Job arrays (docs/slurm.md, "Arrays"): one claim for the whole array, carrying every
-- task's energy and the devices of the tasks that may run at once (all of them, or the %N
-- throttle, which Slurm enforces). Returns the task count and how many may run at once.
local MAX_ARRAY_TASKS = 1000000
local function array_size(spec)
  if spec == nil or spec == "" then
    return nil
  end
  local body, throttle = spec:match("^([%d,:%-]+)%%(%d+)$")
  if not body then
    body = spec:match("^([%d,:%-]+)$")
  end
  if not body then
    return nil, nil, "--array: '" .. spec .. "' is not understood (0-15, 1,3,5, 0-15:4, %N)"
  end
  local count = 0
  for part in (body .. ","):gmatch("([^,]*),") do
    local a, b, step = part:match("^(%d+)%-(%d+):(%d+)$")
    if not a then
      a, b = part:match("^(%d+)%-(%d+)$")
      step = "1"
    end
    if not a then
      a = part:match("^(%d+)$")
      b, step = a, "1"
    end
    if not a or #a > 7 or #b > 7 or #step > 7 then
      return nil, nil, "--array: '" .. part .. "' is not understood (0-15, 1,3,5, 0-15:4, %N)"
    end
    a, b, step = tonumber(a), tonumber(b), tonumber(step)
    if b < a or step < 1 then
      return nil, nil, "--array: '" .. part .. "' is an empty range"
    end
    count = count + math.floor((b - a) / step) + 1
    if count > MAX_ARRAY_TASKS then
      return nil, nil, "--array: more than " .. MAX_ARRAY_TASKS .. " tasks"
    end
  end
  local at_once = count
  if throttle then
    if #throttle > 7 or tonumber(throttle) < 1 then
      return nil, nil, "--array: the %N throttle must be at least 1"
    end
    at_once = math.min(count, tonumber(throttle))
  end
  return count, at_once
end

-- Energy with its unit, as people say it (joulepool.units): 4MJ, 2.5kWh, 750J,
-- 123uJ, converted to integer microjoules exactly, on digit strings: Lua 5.1 numbers are
-- doubles. A figure that is not a whole number of microjoules is refused, never rounded.
-- Each unit: its power of ten in microjoules, and whether it is a watt-hour (x 3,600).
local ENERGY_UNITS = {
  uJ = {0, false}, uj = {0, false}, ["µJ"] = {0, false}, ["µj"] = {0, false},
  mJ = {3, false}, J = {6, false}, j = {6, false}, kJ = {9, false}, kj = {9, false},
  MJ = {12, false}, GJ = {15, false}, gj = {15, false}, TJ = {18, false},
  Wh = {6, true}, wh = {6, true}, kWh = {9, true}, kwh = {9, true}, MWh = {12, true},
  GWh = {15, true},
}

-- The decimal digit string `digits` times the small integer `m`.
local function times(digits, m)
  local out, carry = {}, 0
  for i = #digits, 1, -1 do
    local d = (digits:byte(i) - 48) * m + carry
    table.insert(out, 1, string.char(48 + d % 10))
    carry = math.floor(d / 10)
  end
  while carry > 0 do
    table.insert(out, 1, string.char(48 + carry % 10))
    carry = math.floor(carry / 10)
  end
  return table.concat(out)
end

local function energy_uj(text)
  local int, frac, unit = text:match("^(%d+)%.?(%d*)(.*)$")
  if not int or (text:find("%.") and frac == "") then
    return nil, "--comment: estimate must be a figure and a unit such as 4MJ, 2.5kWh, 750J or 123uJ, got '" .. text .. "'"
  end
  if unit == "mj" or unit == "Mj" or unit == "mWh" or unit == "mwh" then
    return nil, "--comment: '" .. unit .. "' could be milli or mega; write mJ or MJ (or MWh), got '" .. text .. "'"
  end
  local u = ENERGY_UNITS[unit == "" and "uJ" or unit]
  if not u then
    return nil, "--comment: unknown energy unit '" .. unit .. "' (uJ, mJ, J, kJ, MJ, GJ, TJ, Wh, kWh, MWh, GWh), got '" .. text .. "'"
  end
  local digits, shift = int .. frac, u[1] - #frac
  if u[2] then
    digits, shift = times(digits, 36), shift + 2
  end
  if shift >= 0 then
    digits = digits .. string.rep("0", shift)
  else
    if not digits:sub(shift):match("^0+$") then
      return nil, "--comment: estimate '" .. text .. "' is not a whole number of microjoules (never rounded)"
    end
    digits = digits:sub(1, #digits + shift)
  end
  digits = digits:gsub("^0+", "")
  if digits == "" then
    digits = "0"
  end
  if #digits > 19 then
    return nil, "--comment: estimate '" .. text .. "' is past what a ledger figure holds"
  end
  return digits
end

-- --comment=pool:estimate=4MJ,grade=G,class=C or pool:estimate_uj=N,... (anywhere in the
-- comment, up to a space or ';')
local function parse_comment(comment)
  local spec = (comment or ""):match("pool:([^%s;]*)")
  if spec == nil then
    return {}
  end
  local out = {}
  for pair in spec:gmatch("[^,]+") do
    local k, v = pair:match("^([%w_]+)=(.+)$")
    if not k then
      return nil, "--comment: '" .. pair .. "' is not key=value (pool:estimate=4MJ,grade=G,class=C)"
    end
    if k == "estimate_uj" then
      if not v:match("^%d+$") or #v > 18 then
        return nil, "--comment: estimate_uj must be a whole number of microjoules, got '" .. v .. "'"
      end
      v = v:gsub("^0+(%d)", "%1")
    elseif k == "estimate" then
      local uj, err = energy_uj(v)
      if not uj then
        return nil, err
      end
      k, v = "estimate_uj", uj
    elseif k == "grade" then
      if v ~= "Estimator" and v ~= "ModelBased" then
        return nil, "--comment: grade must be Estimator or ModelBased (an estimate is a prediction, never a HwShunt reading), got '" .. v .. "'"
      end
    elseif k == "class" then
      if not v:match(SAFE) then
        return nil, "--comment: class may hold letters, digits and _.:@+/- only, got '" .. v .. "'"
      end
    else
      return nil, "--comment: unknown key '" .. k .. "' (known: estimate, estimate_uj, grade, class)"
    end
    if out[k] then
      return nil, "--comment: " .. k .. " given twice"
    end
    out[k] = v
  end
  if out.grade and not out.estimate_uj then
    return nil, "--comment: grade without estimate_uj"
  end
  return out
end

local function admin_comment(c, state, reason, renews)
  local parts = {
    "pool:claim=" .. c.id,
    "entitlement=" .. c.entitlement,
    "gang=" .. c.gang,
    "per_member=" .. c.per_member,
    "estimate_uj=" .. c.estimate_uj,
    "grade=" .. c.grade,
  }
  if c.class then
    parts[#parts + 1] = "class=" .. c.class
  end
  if c.tasks then
    parts[#parts + 1] = "tasks=" .. c.tasks
  end
  parts[#parts + 1] = "state=" .. state
  if reason then
    parts[#parts + 1] = "reason=" .. reason
  end
  if renews then
    parts[#parts + 1] = "renews_ms=" .. renews
  end
  return table.concat(parts, ";")
end

local function claim_json(c)
  local s = '{"id":' .. json_string(c.id) .. ',"entitlement":' .. json_string(c.entitlement)
    .. ',"gang_size":' .. c.gang .. ',"devices_per_member":' .. c.per_member
    .. ',"estimate":{"uj":' .. c.estimate_uj .. ',"grade":' .. json_string(c.grade) .. "}"
  if c.class then
    s = s .. ',"class":' .. json_string(c.class)
  end
  return s .. "}"
end

local function hold(job_desc, p, c, state, reason, message, renews)
  if p.mode == "shadow" then
    -- Shadow mode: Pool decided and counted the verdict; only the hold is left out.
    job_desc.admin_comment = admin_comment(c, "shadow_" .. state, reason, renews)
    slurm.log_info("pool bridge: shadow mode: claim %s would have been held (%s)", c.id, reason)
    return slurm.SUCCESS
  end
  job_desc.priority = 0
  job_desc.admin_comment = admin_comment(c, state, reason, renews)
  slurm.log_user("Pool: job held: " .. message)
  slurm.log_info("pool bridge: claim %s held (%s)", c.id, reason)
  return slurm.SUCCESS
end

-- A job refused before Pool was asked (or for a claim Pool found invalid). In shadow mode
-- it goes on: the admin comment records the code it would have been refused with.
local function refuse(job_desc, p, code, message)
  if p.mode == "shadow" then
    job_desc.admin_comment = "pool:shadow=rejected;reason=" .. code
    slurm.log_info("pool bridge: shadow mode: a job would have been rejected (%s)", code)
    slurm.log_user("Pool (trial run, not enforced): this job would be rejected: " .. message)
    return slurm.SUCCESS
  end
  slurm.log_user("Pool: " .. message)
  return slurm.ERROR
end

-- Never claimed (docs/slurm.md, "Exempt jobs"); the agent counts these in its log.
local function exempt(job_desc, kind, name)
  local why = kind
  if name ~= nil and tostring(name):match(SAFE) then
    why = kind .. ":" .. name
  end
  job_desc.admin_comment = "pool:exempt=" .. why
  slurm.log_info("pool bridge: job exempt (%s)", why)
  return slurm.SUCCESS
end

local function unreachable(job_desc, p, c, why)
  slurm.log_error("pool bridge: Pool unreachable for claim %s: %s", c.id, why)
  if p.fail_open or p.mode == "shadow" then
    job_desc.admin_comment = admin_comment(c, "unaccounted", "pool_unreachable")
    slurm.log_user("Pool: unreachable (" .. why .. "); the job goes on unaccounted (fail-open)")
    return slurm.SUCCESS
  end
  return hold(job_desc, p, c, "unreachable", "pool_unreachable",
    "Pool is unreachable (" .. why .. "); the job waits until Pool answers (fail-closed)")
end

-- What `pool progress` reads inside the job (API.md "Run time"): the service, the claim and
-- the claim's own token, which may report that claim's progress and nothing else. Slurm
-- sets a job's environment from here for batch jobs only.
local function run_time_env(job_desc, p, c, answer)
  if type(answer) ~= "table" or type(answer.claim_token) ~= "string" or job_desc.script == nil then
    return
  end
  local ok, err = pcall(function()
    job_desc.environment.POOL_URL = p.url
    job_desc.environment.POOL_CLAIM = c.id
    job_desc.environment.POOL_CLAIM_TOKEN = answer.claim_token
  end)
  if not ok then
    slurm.log_info("pool bridge: claim %s: no run-time environment: %s", c.id, tostring(err))
  end
end

-- The partitions a job may run in: those it names, else the default partition.
local function partitions_of(job_desc, part_list)
  local out = {}
  if job_desc.partition ~= nil and job_desc.partition ~= "" then
    for name in tostring(job_desc.partition):gmatch("[^,]+") do
      out[#out + 1] = name
    end
    return out
  end
  local ok, name = pcall(function()
    for key, part in pairs(part_list or {}) do
      if part.flag_default == 1 then
        return part.name or key
      end
    end
  end)
  if ok and name ~= nil then
    out[1] = name
  end
  return out
end

local INFINITE = 4294967295

-- The job's time limit in minutes: its own (--time), else what Slurm will give it (the
-- partition's DefaultTime, else MaxTime; the longest over its partitions). nil when any
-- is unlimited or unknown: a default estimate then has nothing to scale.
local function time_limit_min(job_desc, part_list, parts)
  local t = job_desc.time_limit
  if set(t, NO_VAL) and t ~= INFINITE and t > 0 then
    return t
  end
  local ok, found = pcall(function()
    local most = nil
    for _, name in ipairs(parts) do
      local part = part_list[name]
      if part == nil then
        return nil
      end
      local d = part.default_time
      if not set(d, NO_VAL) or d == INFINITE or d == 0 then
        d = part.max_time
      end
      if not set(d, NO_VAL) or d == INFINITE or d == 0 then
        return nil
      end
      most = math.max(most or 0, d)
    end
    return most
  end)
  return ok and found or nil
end

-- The estimate of a job that gives none (docs/slurm.md, "Default estimates"): the account's
-- fixed figure, else its partition's, else the configured power times its devices times its
-- time limit. Always Estimator (a guess, which never borrows: §4.4). Returns the figure in
-- microjoules (a digit string), or nil and why not (nil, nil: no default applies).
local function default_estimate(cfg, account, parts, kind, gang, per_member, minutes)
  local fixed = cfg.account_estimate[account]
  if fixed == nil and #parts == 1 then
    fixed = cfg.partition_estimate[parts[1]]
  end
  if fixed ~= nil then
    local uj, err = energy_uj(tostring(fixed))
    if uj == nil then
      -- A file `pool slurm check-config` would have refused: say whose figure it is.
      return nil, "the bridge's default estimate for this job is not understood ("
        .. err:gsub("^%-%-comment: ", "") .. "); ask your administrator"
    end
    return uj
  end
  local watts = cfg.default_estimate[kind == "gpu" and "gpu_power_w" or "cpu_power_w"]
  if watts == nil then
    return nil, nil
  end
  if minutes == nil then
    return nil, "the job has no time limit to scale the default estimate by; give --time or --comment=pool:estimate=4MJ"
  end
  -- W x devices x minutes x 60 s x 10^6 uJ/J, exactly, on digit strings.
  local digits = times(times(times(times(tostring(watts), gang), per_member), minutes), 60)
  digits = (digits .. "000000"):gsub("^0+(%d)", "%1")
  if #digits > 18 then
    return nil, "the default estimate of this job is past what a ledger figure holds"
  end
  return digits
end

-- pool/1 §4 (admission at submission); docs/slurm.md, "Verdicts".
function M.job_submit(job_desc, part_list, submit_uid)
  local cfg, cerr = read_config(CONFIG_PATH)
  if not cfg then
    slurm.log_error("pool bridge: %s", cerr)
    slurm.log_user("Pool bridge misconfigured (" .. cerr .. "); ask your administrator")
    return slurm.ERROR
  end
  local p = cfg.pool
  p.timeout_ms_text = tostring(math.floor(p.timeout * 1000)) .. " ms"

  local account = job_desc.account or job_desc.default_account
  if account == nil or account == "" then
    return refuse(job_desc, p, "no_account",
      "the job names no account (-A/--account); Pool maps accounts to entitlements")
  end
  if cfg.exempt_accounts[account] == true then
    return exempt(job_desc, "account", account)
  end
  local parts = partitions_of(job_desc, part_list)
  local all_exempt = #parts > 0
  for _, name in ipairs(parts) do
    all_exempt = all_exempt and cfg.exempt_partitions[name] == true
  end
  if all_exempt then
    return exempt(job_desc, "partition", table.concat(parts, "+"))
  end
  local gang, per_member, kind = devices(job_desc)
  if kind == "cpu" and p.cpu_only == "exempt" then
    return exempt(job_desc, "cpu_only")
  end
  local entitlement = cfg.accounts[account]
  if type(entitlement) ~= "string" then
    return refuse(job_desc, p, "unmapped_account", "account '" .. account
      .. "' is not mapped to a Pool entitlement in " .. CONFIG_PATH
      .. "; ask your administrator to map it")
  end

  local want, perr = parse_comment(job_desc.comment)
  if not want then
    return refuse(job_desc, p, "bad_comment", perr)
  end
  -- Slurm gives an --exclusive job every GPU of its nodes: with gpus_per_node configured,
  -- it claims them all, so no GPU runs that Pool did not admit.
  local whole = tonumber(p.gpus_per_node or "")
  if kind == "gpu" and whole and job_desc.shared == 0 and whole > tonumber(per_member) then
    per_member = whole
  end
  local tasks, at_once, aerr = array_size(job_desc.array_inx)
  if aerr then
    return refuse(job_desc, p, "bad_array", aerr)
  end
  -- The default estimate is one task's: one task's nodes, before the array's are counted.
  local task_gang = gang
  if tasks then
    gang = gang * at_once
  end
  local c = {
    id = "slurm-" .. p.cluster .. "-" .. new_uuid(),
    entitlement = entitlement,
    gang = tostring(gang),
    per_member = tostring(per_member),
    class = want.class,
    tasks = tasks and tostring(tasks) or nil,
  }
  local fallback, ferr = default_estimate(cfg, account, parts, kind, task_gang, per_member,
    time_limit_min(job_desc, part_list, parts))
  local token = read_token(p.token_file)
  if token == nil then
    slurm.log_error("pool bridge: cannot read the token file %s", p.token_file)
    c.estimate_uj, c.grade = want.estimate_uj or fallback or "0", want.grade or "Estimator"
    if tasks then
      c.estimate_uj = times(c.estimate_uj, tonumber(tasks)):gsub("^0+(%d)", "%1")
    end
    return unreachable(job_desc, p, c, "the bridge's token file is unreadable")
  end

  local no_estimate = "the job carries no energy estimate; give --comment=pool:estimate=4MJ[,grade=ModelBased][,class=C] or --comment=pool:class=C for a class with earned history"
  if want.estimate_uj then
    c.estimate_uj, c.grade = want.estimate_uj, want.grade or "Estimator"
  elseif want.class then
    -- §2.6: the estimate this entitlement's own history earned for the class.
    local body = '{"class":' .. json_string(want.class) .. ',"entitlement":' .. json_string(entitlement) .. "}"
    local status, answer = post(p, token, "/v1/estimates", body)
    if status == nil then
      c.estimate_uj, c.grade = fallback or "0", "Estimator"
      return unreachable(job_desc, p, c, answer)
    end
    if status ~= 200 then
      c.estimate_uj, c.grade = fallback or "0", "Estimator"
      return unreachable(job_desc, p, c, "HTTP " .. status .. " " .. tostring(answer.error))
    end
    if type(answer.estimate) == "table" then
      c.estimate_uj, c.grade = answer.estimate.uj, answer.estimate.grade
      if type(c.estimate_uj) ~= "string" or not c.estimate_uj:match("^%d+$") then
        return refuse(job_desc, p, "bad_class_estimate",
          "the estimate Pool gave is not a whole number of microjoules")
      end
    elseif fallback ~= nil then
      c.estimate_uj, c.grade = fallback, "Estimator"
      slurm.log_user("Pool: class '" .. want.class .. "' has not earned an estimate yet ("
        .. tostring(answer.declined) .. "); the default estimate is used: " .. fallback .. " uJ, Estimator")
    else
      return refuse(job_desc, p, "no_class_estimate", "no estimate for class '" .. want.class
        .. "': " .. tostring(answer.declined) .. " (" .. tostring(answer.observations)
        .. " observations, " .. tostring(answer.evidence) .. " evidence); give --comment=pool:estimate=4MJ")
    end
  elseif fallback ~= nil then
    c.estimate_uj, c.grade = fallback, "Estimator"
    slurm.log_user("Pool: no estimate given; the default estimate is used: " .. fallback
      .. " uJ, Estimator (--comment=pool:estimate=4MJ gives your own)")
  else
    return refuse(job_desc, p, "no_estimate", ferr or no_estimate)
  end

  if tasks then
    -- The estimate is each task's; the array's claim carries every task's.
    c.estimate_uj = times(c.estimate_uj, tonumber(tasks)):gsub("^0+(%d)", "%1")
  end
  local status, answer = post(p, token, "/v1/claims?with=claim_token", claim_json(c))
  if status == nil then
    return unreachable(job_desc, p, c, answer)
  end
  run_time_env(job_desc, p, c, answer)
  if status == 422 then
    return refuse(job_desc, p, "invalid_claim",
      "Pool refused the claim as invalid: " .. tostring(answer.detail))
  end
  if status ~= 200 then
    return unreachable(job_desc, p, c, "HTTP " .. status .. " " .. tostring(answer.error) .. ": " .. tostring(answer.detail))
  end
  if answer.verdict == "admit" then
    job_desc.admin_comment = admin_comment(c, "admitted", nil)
    slurm.log_info("pool bridge: claim %s admitted", c.id)
    return slurm.SUCCESS
  elseif answer.verdict == "queue" then
    local reason = tostring(answer.reason)
    local text = QUEUE_TEXT[reason] or reason
    -- A Queue on the period's budget says when the period renews (DESIGN.md §3); numbers
    -- stay digit strings here, so the milliseconds reach the admin comment exactly.
    local renews = answer.period_end_ms
    if type(renews) == "string" and renews:match("^%d+$") then
      text = text .. "; it fits from " .. os.date("!%Y-%m-%d %H:%M UTC", math.floor(tonumber(renews) / 1000))
        .. ", when the period's budget renews; the agent asks again then"
    else
      renews = nil
    end
    return hold(job_desc, p, c, "queued", reason, "queued (" .. reason .. "): " .. text, renews)
  end
  local reason = tostring(answer.reason)
  if p.mode == "shadow" then
    job_desc.admin_comment = admin_comment(c, "shadow_denied", reason)
    slurm.log_info("pool bridge: shadow mode: claim %s would have been denied (%s)", c.id, reason)
    return slurm.SUCCESS
  end
  slurm.log_user("Pool denied the job (" .. reason .. "): " .. (DENY_TEXT[reason] or reason))
  return slurm.ERROR
end

local HELD = { queued = true, unreachable = true, denied = true }

-- pool/1 §4: a claim is decided for the job as submitted.
function M.job_modify(job_desc, job_rec, part_list, modify_uid)
  if modify_uid == 0 then
    return slurm.SUCCESS
  end
  local note = job_rec.admin_comment or ""
  -- An exempt job stays where its exemption was decided.
  if note:match("^pool:exempt=") and (job_desc.account ~= nil or job_desc.partition ~= nil) then
    slurm.log_user("Pool exempted this job for its account or partition; cancel and resubmit to change them")
    return slurm.ESLURM_ACCESS_DENIED
  end
  local state = note:match("^pool:.*;state=([%w_]+)")
  if state == nil then
    return slurm.SUCCESS
  end
  -- The owner may not lift Pool's hold: before the agent turns it into an administrator's
  -- hold it is a user hold, which Slurm would let the owner release.
  if HELD[state] and set(job_desc.priority, NO_VAL) then
    slurm.log_user("Pool holds this job (" .. state .. "); it is released when Pool admits it")
    return slurm.ESLURM_ACCESS_DENIED
  end
  -- Pool decided the claim for the job as submitted.
  if job_desc.account ~= nil or set(job_desc.min_nodes, NO_VAL) or job_desc.tres_per_node ~= nil
    or job_desc.tres_per_job ~= nil or job_desc.tres_per_task ~= nil or set(job_desc.min_cpus, NO_VAL) then
    slurm.log_user("Pool admitted this job as submitted; cancel and resubmit to change its account, nodes, GPUs or CPUs")
    return slurm.ESLURM_ACCESS_DENIED
  end
  return slurm.SUCCESS
end

slurm.log_info("pool bridge: pool_bridge.lua loaded")
return M
