-- reserve.lua: take one request from the RPM bucket, tokens from the TPM
-- bucket, one concurrency slot and tokens of the day's budget, or nothing.
-- Mirrors tenantState.decide in bucket.go.
--
-- ARGV: 1 id, 2 tokens, 3 rpm, 4 tpm, 5 concurrency, 6 daily tokens,
--       7 reservation ttl (ms), 8 state ttl (ms), 9 over (max tokens -
--       tokens),
--       10-14 a detected sub-bucket's starting state (see init_state), or
--       10 = 0 for none: a new bucket starts full,
--       15 hot rps, 16 hot n: split the tenant when more than hot rps
--       requests reach this bucket in one second (0: never; see
--       detect_hot)
-- Returns {code, retry_ms, remaining_requests, reset_requests_ms,
--          remaining_tokens, reset_tokens_ms, created}; code 0 is allowed,
--          6 a duplicate id; created is 1 when the state hash did not exist.
--          Code 7: the tenant is split (this bucket admits nothing); the
--          reply goes on with switched (1 when this call split it) and the
--          split record (see split_reply).

local id = ARGV[1]
local tokens, rpm, tpm = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local conc, daily = tonumber(ARGV[5]), tonumber(ARGV[6])
local ttl, state_ttl = tonumber(ARGV[7]), tonumber(ARGV[8])
local over = tonumber(ARGV[9])
if tpm == 0 then over = 0 end -- not taken from the bucket: nothing at risk

local hot_rps, hot_n = tonumber(ARGV[15]) or 0, tonumber(ARGV[16]) or 0

local st = redis.call('HMGET', KEYS[1], 'last', 'rb', 'ra', 'tb', 'ta', 'day', 'used', 'ov', 'hot', 'ws', 'wc')
-- Every reserve writes 'last': without it the tenant is new, or Redis lost
-- its state.
local created = 0

-- split_reply is the code-7 reply for the split record rec.
local function split_reply(switched, rec)
  local r = {7, 0, 0, 0, 0, 0, created, switched}
  for _, v in ipairs(split_fields(rec)) do r[#r + 1] = v end
  return r
end

if not st[1] then
  created = 1
  init_state(st, ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[14])
end
if st[9] then
  -- Split: the balance lives in the sub-buckets now. Reading the record
  -- keeps it alive as long as the tenant's nodes look at it.
  redis.call('PEXPIRE', KEYS[1], state_ttl)
  return split_reply(0, st[9])
end
local now = tenant_now(st[1])
local ov = purge(now, st[8])
if redis.call('HEXISTS', KEYS[2], id) == 1 then
  return {6, 0, 0, 0, 0, 0, created}
end

local rb, ra, tb, ta = st[2], st[3], st[4], st[5]
if rpm > 0 then rb, ra = refill(rb, ra, rpm, now) end
if tpm > 0 then tb, ta = refill(tb, ta, tpm, now) end
local today = day_of(now)
local used = tonumber(st[7]) or 0
if tonumber(st[6]) ~= today then used = 0 end
local inflight = redis.call('HLEN', KEYS[2])
-- No reservation held (the keys may also have expired whole): none at risk.
if inflight == 0 then ov = 0 end

-- Requests in this second of Redis's clock, this one included.
local sec = math.floor(now / 1000)
local wc = 1
if tonumber(st[10]) == sec then wc = (tonumber(st[11]) or 0) + 1 end
if hot_rps > 0 and hot_n > 1 and wc > hot_rps then
  local rec = detect_hot(now, hot_n, rpm, tpm, daily, rb, tb, today, used, ov)
  redis.call('HSET', KEYS[1], 'last', now, 'hot', rec)
  redis.call('HDEL', KEYS[1], 'ws', 'wc')
  redis.call('PEXPIRE', KEYS[1], state_ttl)
  return split_reply(1, rec)
end

local code, retry = 0, 0
if tpm > 0 and tokens > tpm then
  code = 5
elseif daily > 0 and used + tokens > daily then
  code = 4
  if tokens <= daily then retry = (today + 1) * DAY - now end
else
  if conc > 0 and inflight >= conc then code, retry = 3, 1000 end
  if rpm > 0 and rb < UNITS then
    if code == 0 then code = 1 end
    local w = wait_ms(rb, rpm, UNITS)
    if w > retry then retry = w end
  end
  -- tpmNeed in bucket.go: the reservation plus the overage held beyond
  -- the allowance its own overage leaves.
  local need = tokens + math.max(0, ov - math.max(0, tpm - over))
  if tpm > 0 and tb < need * UNITS then
    if code == 0 then code = 2 end
    local w = wait_ms(tb, tpm, need * UNITS)
    if need > tpm and w < 1000 then w = 1000 end
    if w > retry then retry = w end
  end
end

if code == 0 then
  if rpm > 0 then rb = rb - UNITS end
  if tpm > 0 then tb = tb - tokens * UNITS end
  used = used + tokens
  local v = ARGV[2] .. ':' .. ARGV[4] .. ':' .. string.format('%d', today)
  if over > 0 then
    ov = ov + over
    v = v .. ':' .. string.format('%d', over)
  end
  redis.call('HSET', KEYS[2], id, v)
  redis.call('ZADD', KEYS[3], now + ttl, id)
  -- The reservation keys outlive their newest reservation's expiry.
  redis.call('PEXPIRE', KEYS[2], ttl + FULL)
  redis.call('PEXPIRE', KEYS[3], ttl + FULL)
end

-- Refilled buckets are written even when denied: the same balance as a
-- function of time, so nothing observable changes.
local f = {'last', now, 'day', today, 'used', used, 'ov', ov, 'ws', sec, 'wc', wc}
if rpm > 0 then
  f[#f + 1] = 'rb'; f[#f + 1] = rb; f[#f + 1] = 'ra'; f[#f + 1] = ra
end
if tpm > 0 then
  f[#f + 1] = 'tb'; f[#f + 1] = tb; f[#f + 1] = 'ta'; f[#f + 1] = ta
end
redis.call('HSET', KEYS[1], unpack(f))
redis.call('PEXPIRE', KEYS[1], state_ttl)

local rem_req, reset_req, rem_tok, reset_tok = 0, 0, 0, 0
if rpm > 0 then
  rem_req = math.floor(rb / UNITS)
  reset_req = wait_ms(rb, rpm, rpm * UNITS)
end
if tpm > 0 then
  rem_tok = whole_tokens(tb)
  reset_tok = wait_ms(tb, tpm, tpm * UNITS)
end
return {code, retry, rem_req, reset_req, rem_tok, reset_tok, created}
