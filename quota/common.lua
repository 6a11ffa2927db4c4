-- common.lua is prepended to reserve.lua, reconcile.lua and usage.lua. It
-- repeats bucket.go's integer arithmetic: Lua numbers are doubles, exact for
-- the integers used here (every value stays below 2^53, see quota.MaxRate).
--
-- A tenant's keys share the hash tag {tenant}:
--   KEYS[1] state hash: last (ms), rb/ra and tb/ta (request and token bucket
--           units and their time), day and used (the UTC day and its tokens)
--   KEYS[2] reservations hash: id -> "tokens:tpm:day"
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

-- purge drops the reservations expired at now: their tokens stay charged.
local function purge(now)
  local ids = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  local n = #ids
  if n == 0 then return end
  for i = 1, n, 1000 do
    redis.call('HDEL', KEYS[2], unpack(ids, i, math.min(i + 999, n)))
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
end

-- refill brings a bucket (units at time at, nil when unset) of limit tokens
-- per minute to now, clamped to [0, capacity]; an unset bucket starts full.
local function refill(units, at, limit, now)
  local cap = limit * UNITS
  if not units then return cap, now end
  units, at = tonumber(units), tonumber(at)
  if now > at then
    local dt = now - at
    if dt > FULL then dt = FULL end
    units = units + dt * limit
    at = now
  end
  if units > cap then units = cap elseif units < 0 then units = 0 end
  return units, at
end

local function ceil_div(a, b) return math.floor((a + b - 1) / b) end

-- wait_ms is the ms until a bucket of limit holds need units.
local function wait_ms(units, limit, need)
  if units >= need then return 0 end
  return ceil_div(need - units, limit)
end

local function day_of(ms) return math.floor(ms / DAY) end
