package luascript

// Lease-lock scripts. The lock key holds the owner's random token; only the
// owner may release or extend it. KEYS[1] is the lock key, ARGV[1] the token.

// LockRelease deletes the lock if the caller still owns it: 1 released,
// 0 not owner (expired, or taken by someone else).
var LockRelease = define("cachewatch_lock_release", `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// LockExtend resets the lock's TTL to ARGV[2] ms if the caller still owns it:
// 1 extended, 0 not owner.
var LockExtend = define("cachewatch_lock_extend", `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)

// LockAcquireFenced takes the lock (SET NX PX ARGV[2]) and, on success,
// returns the next fencing token of the lock name; 0 when the lock is busy.
// KEYS[2] is the fencing counter, on the lock's slot; ARGV[3] is its TTL in ms.
//
// The token is max(counter+1, server time in µs). While the counter key lives
// the tokens strictly increase; after it expired (no acquisition for ARGV[3]
// ms) the server clock has moved on by at least that long, so the new token
// still exceeds every earlier one unless more than one token per microsecond
// was issued. The counter therefore needs only a TTL, never a permanent key.
// string.format('%d') keeps all digits (tostring would round to 14).
var LockAcquireFenced = define("cachewatch_lock_acquire_fenced", `
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
if n < now then n = now end
redis.call('SET', KEYS[2], string.format('%d', n), 'PX', ARGV[3])
return n`)

// fenceNext is the Lua that issues the next fencing token of the lock whose
// counter is KEYS[2] (ARGV[3]: the counter's TTL in ms), as
// LockAcquireFenced does; 1 when KEYS[2] is not given (an unfenced lock).
const fenceNext = `
local function fence()
  if not KEYS[2] then return 1 end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local n = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
  if n < now then n = now end
  redis.call('SET', KEYS[2], string.format('%d', n), 'PX', ARGV[3])
  return n
end
`

// LockAcquire takes the lock (SET NX PX ARGV[2] with value ARGV[1]) or,
// when it is held by a live-marked holder (a cachewatch value ending with
// '@', lockholder.LiveMark) whose liveness key is gone, takes it over:
// the value is replaced and the lease set anew in the same script, and a
// fenced lock's token moves on, so the dead holder, were it to come back,
// is refused by every fenced writer.
//
// KEYS[2], when given, is the fencing counter (ARGV[3] its TTL in ms).
// ARGV[4] is the liveness check: "0" none (a plain SET NX), "1" return the
// live-marked holder's value to the caller, who checks its liveness key
// itself (Redis Cluster: that key is on another slot) and takes over with
// LockTakeOver, or a key prefix (lockholder.AlivePrefix): check here, on
// one server, the key <prefix>{<instance>}. Reply: {0} busy, {1, fence}
// acquired, {2, fence, old value} taken over, {3, old value} busy with a
// live-marked holder for the caller to check. Fence is 1 when unfenced.
var LockAcquire = define("cachewatch_lock_acquire", fenceNext+`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, fence()}
end
if ARGV[4] == '0' then return {0} end
local old = redis.pcall('GET', KEYS[1])
if type(old) ~= 'string' or string.sub(old, -1) ~= '@' then return {0} end
local inst = string.match(old, '^cw1|[^|]*|[^|]*|[^|]*|%d+|([%w_-]+)|%d+@$')
if not inst then return {0} end
if ARGV[4] == '1' then return {3, old} end
local alive = redis.pcall('EXISTS', ARGV[4] .. '{' .. inst .. '}')
if type(alive) ~= 'number' then return {3, old} end
if alive ~= 0 then return {0} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {2, fence(), old}`)

// LockTakeOver replaces the lock's value ARGV[4] (a holder found dead) by
// ARGV[1] with a lease of ARGV[2] ms, only if the lock still holds exactly
// ARGV[4]: compare-and-take, so a holder that released, or another waiter
// that took over first, is never overwritten. KEYS and ARGV[3] as for
// LockAcquire. Reply: the fencing token (1 unfenced), or 0 when the value
// changed.
var LockTakeOver = define("cachewatch_lock_take_over", fenceNext+`
if redis.pcall('GET', KEYS[1]) ~= ARGV[4] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return fence()`)

// AliveRefresh keeps a process instance's liveness key (KEYS[1]) for at
// least ARGV[1] ms from now: it never shortens the key's life, so clients
// of one process that keep the same key with different TTLs each get at
// least their own. Reply: 1.
var AliveRefresh = define("cachewatch_alive_refresh", `
local left = redis.call('PTTL', KEYS[1])
if left < 0 or left < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
end
return 1`)
