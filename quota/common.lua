-- common.lua is prepended to reserve.lua, reconcile.lua and usage.lua. It
-- repeats bucket.go's integer arithmetic: Lua numbers are doubles, exact for
-- the integers used here (every value stays below 2^53, see quota.MaxRate).
--
-- A tenant's keys share the hash tag {tenant}:
--   KEYS[1] state hash: last (ms), rb/ra and tb/ta (request and token bucket
--           units and their time), day and used (the UTC day and its tokens),
--           ov (the potential overage of the reservations held, in tokens)
--   KEYS[2] reservations hash: id -> "tokens:tpm:day", or
--           "tokens:tpm:day:over" for an estimated reservation taken from the
--           TPM bucket (over = max tokens - tokens)
--   KEYS[3] expiries sorted set: id scored by its expiry (ms)

local UNITS = 60000 -- bucket units per token; a bucket of limit L gains L units per ms
local FULL = 60000  -- ms for an empty bucket to fill
local DAY = 86400000

-- Redis < 5 replicates scripts verbatim and forbids writes after TIME;
-- effects replication (the only mode since Redis 7) allows them.
if redis.replicate_commands then redis.replicate_commands() end

-- server_ms is Redis's own clock in ms: every node shares it, so skewed node
-- clocks cannot mint or burn tokens.
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- tenant_now is the tenant's clock: never earlier than its last use.
local function tenant_now(last)
  local now = server_ms()
  if last and tonumber(last) > now then now = tonumber(last) end
  return now
end

-- parse_reservation splits a reservations hash value into tokens, tpm, day
-- and over (0 when absent).
local function parse_reservation(v)
  local t, l, d, o = string.match(v, '^(%d+):(%d+):(%d+):?(%d*)$')
  return tonumber(t), tonumber(l), tonumber(d), tonumber(o) or 0
end

-- purge drops the reservations expired at now: their tokens stay charged.
-- ov is the state's ov field as read (nil when unset); purge returns it less
-- the overage of the reservations dropped, and stores it when it changed,
-- so that a script that returns early cannot lose the change.
local function purge(now, ov)
  ov = tonumber(ov) or 0
  local ids = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  local n = #ids
  if n == 0 then return ov end
  local gone = 0
  for i = 1, n, 1000 do
    local j = math.min(i + 999, n)
    local vals = redis.call('HMGET', KEYS[2], unpack(ids, i, j))
    for k = 1, #vals do
      if vals[k] then
        local _, _, _, o = parse_reservation(vals[k])
        gone = gone + o
      end
    end
    redis.call('HDEL', KEYS[2], unpack(ids, i, j))
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if gone > 0 then
    ov = math.max(0, ov - gone)
    if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'ov', ov) end
  end
  return ov
end

local function ceil_div(a, b) return math.floor((a + b - 1) / b) end

-- refill brings a bucket (units at time at, nil when unset) of limit tokens
-- per minute to now, capped at capacity; an unset bucket starts full. A
-- balance below zero (a debt) stays and refills like any other.
local function refill(units, at, limit, now)
  local cap = limit * UNITS
  if not units then return cap, now end
  units, at = tonumber(units), tonumber(at)
  if now > at then
    -- Never more time than fills the bucket: the product stays exact.
    local dt = now - at
    local fill = math.max(0, ceil_div(cap - units, limit))
    if dt > fill then dt = fill end
    units = units + dt * limit
    at = now
  end
  if units > cap then units = cap end
  return units, at
end

-- whole_tokens is the whole tokens in a bucket of units, 0 in debt; owed is
-- its debt in whole tokens, rounded up.
local function whole_tokens(units) return math.floor(math.max(0, units) / UNITS) end
local function owed(units) return ceil_div(math.max(0, -units), UNITS) end

-- wait_ms is the ms until a bucket of limit holds need units.
local function wait_ms(units, limit, need)
  if units >= need then return 0 end
  return ceil_div(need - units, limit)
end

local function day_of(ms) return math.floor(ms / DAY) end

-- Hot tenants detected by their request rate (hot.go): when the reserve
-- script finds more requests in one second than the rate allows, it splits
-- the tenant in the same call: it writes the split record into the state
-- hash (field 'hot'), and from then on the whole bucket admits nothing.
-- The record is "at:n:rpm:tpm:daily:rb:tb:day:used": the time of the split
-- (ms, also the epoch that names the sub-buckets' keys), n, the limits in
-- force, and the balance moved out: rb and tb the request and token units
-- at the time of the split (0 for a limit of 0), tb less the overage of the
-- estimated reservations still held here (their worst case is charged
-- now, since their settlement here reaches no sub-bucket), and the day's
-- used tokens plus that overage. The limiter divides it among the n
-- sub-buckets so that their parts add up to it exactly.
local function detect_hot(now, n, rpm, tpm, daily, rb, tb, today, used, ov)
  local r, t = 0, 0
  if rpm > 0 then r = tonumber(rb) end
  if tpm > 0 then t = tonumber(tb) - ov * UNITS end
  return string.format('%d:%d:%d:%d:%d:%d:%d:%d:%d', now, n, rpm, tpm, daily, r, t, today, used + ov)
end

-- split_fields is a split record's fields, as numbers.
local function split_fields(rec)
  local out = {}
  for v in string.gmatch(rec, '[^:]+') do out[#out + 1] = tonumber(v) end
  return out
end

-- init_state gives a detected sub-bucket that does not exist yet its part
-- of the split balance instead of a full bucket: st is the HMGET of
-- 'last', 'rb', 'ra', 'tb', 'ta', 'day', 'used'; at is the time of the
-- split (ms; '0' or '' for none: the bucket starts full); rb and tb the
-- part's units ('' leaves that bucket full), day and used its day count.
-- Only a bucket that does not exist is set, so every node that brings the
-- same part sets it once.
local function init_state(st, at, rb, tb, day, used)
  at = tonumber(at) or 0
  if at <= 0 then return end
  st[1] = at
  if rb ~= '' then st[2], st[3] = rb, at end
  if tb ~= '' then st[4], st[5] = tb, at end
  st[6], st[7] = day, used
end
