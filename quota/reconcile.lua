-- reconcile.lua: settle a reservation to the tokens actually used. Mirrors
-- tenantState.settle in bucket.go.
--
-- ARGV: 1 id, 2 actual tokens
-- Returns 1 when the reservation was held and is now settled, 0 when it was
-- unknown, expired or settled before (nothing changes).

local id, actual = ARGV[1], tonumber(ARGV[2])

local st = redis.call('HMGET', KEYS[1], 'last', 'tb', 'ta', 'day', 'used', 'ov')
local now = tenant_now(st[1])
local ov = purge(now, st[6])
local v = redis.call('HGET', KEYS[2], id)
if not v then return 0 end
redis.call('HDEL', KEYS[2], id)
redis.call('ZREM', KEYS[3], id)
-- The state is gone (lost by Redis): the slot is freed, there is nothing
-- else to settle against.
if not st[1] then return 1 end

local tokens, tpm, day, over = parse_reservation(v)
local f = {'last', now, 'ov', math.max(0, ov - over)}
if tpm > 0 then
  -- settleUnits in bucket.go: a debt up to the reservation's max tokens,
  -- beyond it floored at 0 (never raising a balance below it).
  local tb, ta = refill(st[2], st[3], tpm, now)
  local most = tokens + over
  tb = tb + (tokens - math.min(actual, most)) * UNITS
  if actual > most then
    tb = math.max(math.min(tb, 0), tb - (actual - most) * UNITS)
  end
  local cap = tpm * UNITS
  if tb > cap then tb = cap end
  f[#f + 1] = 'tb'; f[#f + 1] = tb; f[#f + 1] = 'ta'; f[#f + 1] = ta
end
local today = day_of(now)
local used = tonumber(st[5]) or 0
if tonumber(st[4]) ~= today then used = 0 end
if day == today then
  used = used + actual - tokens
  if used < 0 then used = 0 end
end
f[#f + 1] = 'day'; f[#f + 1] = today; f[#f + 1] = 'used'; f[#f + 1] = used
redis.call('HSET', KEYS[1], unpack(f))
return 1
