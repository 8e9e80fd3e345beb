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
