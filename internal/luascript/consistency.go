package luascript

// Consistency scripts of the instrument client: versioned compare-and-set
// writes and sliding TTLs.

// VersionedSet stores ARGV[2] under version ARGV[1] in hash KEYS[1] (fields
// v and d) only if no version or an older one is stored. ARGV[3] is the TTL
// in ms (0: no expiry). Versions are non-negative decimal integers compared
// exactly as digit strings (Lua numbers would round past 2^53).
// Returns {1, v} written, {0, stored} same version, {-1, stored} older.
var VersionedSet = define("cachewatch_versioned_set", `
local cur = redis.call('HGET', KEYS[1], 'v')
if cur then
  local new = ARGV[1]
  if cur == new then return {0, cur} end
  if #new < #cur or (#new == #cur and new < cur) then return {-1, cur} end
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'd', ARGV[2])
if ARGV[3] ~= '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
else
  redis.call('PERSIST', KEYS[1])
end
return {1, ARGV[1]}`)

// SlideTTL resets KEYS[1]'s TTL to ARGV[1] ms only once no more than ARGV[2]
// ms remain, so a key read a thousand times a second is rewritten (and its
// expiry replicated) once per slice of its life, not on every read.
// Returns 1 touched, 0 not yet due, -1 no expiry (left alone), -2 missing.
var SlideTTL = define("cachewatch_slide_ttl", `
local left = redis.call('PTTL', KEYS[1])
if left < 0 then return left end
if left > tonumber(ARGV[2]) then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1`)
