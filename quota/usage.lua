-- usage.lua: a tenant's usage now. Mirrors tenantState.usage in bucket.go.
-- It writes nothing but the purge of expired reservations.
--
-- ARGV: 1 rpm, 2 tpm, 3-7 a detected sub-bucket's starting state (as
--       reserve.lua's 10-14: what the bucket would start with; nothing is
--       written)
-- Returns {in_flight, requests_available, tokens_available, daily_tokens_used,
--          tokens_owed}, followed by the split record's fields when the
--          tenant is split (see detect_hot).

local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])

local st = redis.call('HMGET', KEYS[1], 'last', 'rb', 'ra', 'tb', 'ta', 'day', 'used', 'ov', 'hot')
if not st[1] then init_state(st, ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]) end
local now = tenant_now(st[1])
purge(now, st[8])
local inflight = redis.call('HLEN', KEYS[2])
local req, tok, used, debt = 0, 0, 0, 0
if rpm > 0 then
  local rb = refill(st[2], st[3], rpm, now)
  req = math.floor(rb / UNITS)
end
if tpm > 0 then
  local tb = refill(st[4], st[5], tpm, now)
  tok = whole_tokens(tb)
  debt = owed(tb)
end
if tonumber(st[6]) == day_of(now) then used = tonumber(st[7]) end
local out = {inflight, req, tok, used, debt}
if st[9] then
  for _, v in ipairs(split_fields(st[9])) do out[#out + 1] = v end
end
return out
