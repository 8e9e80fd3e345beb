package luascript

// Stale-while-revalidate cache scripts. A cached value is a hash at KEYS[1]:
//
//	v  encoded value        f  fresh-until (unix ms)   h  hard-until (unix ms)
//	d  last load time (ms)  n  1 for a cached "not found"  e  consecutive refresh failures
//
// KEYS[2] is the refresh claim (a plain SET NX PX key holding the owner's
// token). KEYS[3], when given, is the queue of wake-up channels of the
// processes waiting for the claim holder's value (a sorted set, scored in
// the order they arrived): one channel per process (subscribed once, for
// all its keys), registered by the read that finds the key being loaded and
// published to by the write that ends the load — so a process waits without
// a subscription of its own per key, and a write that nobody waits for
// publishes nothing. Callers keep the keys in one hash slot
// ({tag}) so the scripts run on Redis Cluster. Time comes from the caller (ARGV) rather than Redis TIME,
// so the caller's clock decides fresh/stale/expired and tests can inject it;
// the key's own PEXPIRE (set a little past the hard TTL) only collects garbage.

// FetchRead reads a cached value and, when a refresh is due and nobody holds
// the claim, grants it in the same round trip — so a caller that loses the
// race learns it without another command, and the check of the value and
// the grant are atomic (the "double check after taking the lock" cannot
// miss a value written in between).
//
// ARGV: now_ms, xfetch factor (β·−ln(rand); 0 disables early refresh),
// claim_ttl_ms, token, and optionally the caller's wake-up channel. Reply:
// {state, granted, v, f, n, e, h} where state is 0 missing, 1 fresh, 2
// stale, 3 past its hard TTL; v, f, n, e and h only for states 1 and 2;
// for states 0 and 3, {state, granted, failing}. A fresh value is
// refreshed early (XFetch, Vattani et al.) when now + d·factor reaches f;
// then the claim is offered too. A caller that finds nothing servable and
// the claim taken must wait: its channel joins the end of KEYS[3] (once),
// which lives as long as a claim. A claim already held by token is granted
// again (not extended): a read sent again after a timeout, under the same
// token, learns that an earlier attempt took it.
//
// A token may name its holder's wake-up channel ("<random>@<channel>"): a
// claim whose holder's channel has no subscriber any more — its process
// died, and Redis closed its connections — is taken over at once (granted
// 2) instead of after claim_ttl_ms. A claim that a failed load keeps for
// its hold-off ("!<token>", FetchFail) is neither granted nor taken over:
// failing is 1, and a caller with nothing servable does not wait for it.
var FetchRead = define("cachewatch_fetch_read", `
local now = tonumber(ARGV[1])
local h = redis.call('HMGET', KEYS[1], 'v', 'f', 'h', 'd', 'n', 'e')
local state = 0
if h[2] then
  local fresh = tonumber(h[2])
  if now >= tonumber(h[3]) then
    state = 3
  elseif now >= fresh then
    state = 2
  else
    state = 1
    local xf = tonumber(ARGV[2])
    if xf <= 0 or now + tonumber(h[4]) * xf < fresh then
      return {1, 0, h[1], h[2], h[5], h[6], h[3]}
    end
  end
end
local granted, failing = 0, 0
if redis.call('SET', KEYS[2], ARGV[4], 'NX', 'PX', ARGV[3]) then
  granted = 1
else
  local holder = redis.call('GET', KEYS[2])
  if holder == ARGV[4] then
    granted = 1
  elseif string.sub(holder, 1, 1) == '!' then
    failing = 1
  else
    local at = string.find(holder, '@', 1, true)
    if at then
      local subs = redis.pcall('PUBSUB', 'NUMSUB', string.sub(holder, at + 1))
      if type(subs) == 'table' and subs[2] == 0 then
        redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[3])
        granted = 2
      end
    end
  end
end
if state == 0 or state == 3 then
  if granted == 0 and failing == 0 and KEYS[3] and ARGV[5] and ARGV[5] ~= '' then
    redis.call('ZADD', KEYS[3], 'NX', redis.call('ZCARD', KEYS[3]), ARGV[5])
    redis.call('PEXPIRE', KEYS[3], ARGV[3])
  end
  return {state, granted, failing}
end
return {state, granted, h[1], h[2], h[5], h[6], h[3]}
`)

// wakeWaiters is the Lua that publishes message m to every waiting
// process's channel (KEYS[3]) and forgets them. The message leads with the
// value's name (length-prefixed: a key may hold any byte), so one channel
// per process serves all its keys.
//
// It publishes to the last process to arrive first. Redis queues a client
// that a command gave a reply (here, a message) at the head of its list of
// clients to write to, and writes that list from the head once the command
// is done (networking.c, putClientInPendingWriteQueue): the sockets are
// written in the reverse order of the PUBLISHes. So the processes are woken
// in the order they started waiting, the longest waiting first — as the
// timers of in-process coalescers would wake them. On 32 processes sharing
// 2 cores the order decides whose callers wait for the others to be
// scheduled: in BenchmarkStampede (p32-k1) the rank correlation of a
// process's start and end went from +0.04 to +0.68 with it, and a crowd's
// slowest process ended 3.4 ms sooner (median of 50 crowds).
const wakeWaiters = `
local function wake(m)
  if not KEYS[3] then return end
  local ws = redis.call('ZREVRANGE', KEYS[3], 0, -1)
  if #ws == 0 then return end
  redis.call('DEL', KEYS[3])
  m = #KEYS[1] .. ':' .. KEYS[1] .. m
  for _, ch in ipairs(ws) do redis.call('PUBLISH', ch, m) end
end
`

// FetchWrite stores a freshly loaded value only if the caller still holds
// the refresh claim (memcache's "lease invalidated by delete"): an
// invalidation deletes the claim, and a claim that ran out may have passed
// to another loader, so a load that started before either must not be
// stored as fresh over what came after it. Stored or refused, it publishes
// to the waiting processes' channels so that they wake at once
// (after a refusal they read again and one of them takes the claim).
// A stored value of up to 64 KiB travels in the message — "=f:h:n:v" —
// so a woken waiter needs no second round trip to read it; a refusal or a
// larger value publishes "1" and the waiters read again.
//
// ARGV: token, v, f, h, d, n, pexpire_ms. Reply: 1 stored, 0 refused (the
// claim was no longer the caller's).
var FetchWrite = define("cachewatch_fetch_write", wakeWaiters+`
local held = redis.call('GET', KEYS[2]) == ARGV[1]
if held then
  redis.call('HSET', KEYS[1], 'v', ARGV[2], 'f', ARGV[3], 'h', ARGV[4], 'd', ARGV[5], 'n', ARGV[6], 'e', 0)
  redis.call('PEXPIRE', KEYS[1], ARGV[7])
  redis.call('DEL', KEYS[2])
end
if held and #ARGV[2] <= 65536 then
  wake('=' .. ARGV[3] .. ':' .. ARGV[4] .. ':' .. ARGV[6] .. ':' .. ARGV[2])
else
  wake('1')
end
if held then return 1 end
return 0
`)

// FetchFail records a failed load: it counts a consecutive failure on the
// stored value (if any) and, if the caller still owns the claim, keeps it
// for a hold-off, marked failed ("!<token>"), so that a failing source is
// called once per hold-off rather than by every caller (0 releases it at
// once), and wakes the waiting processes with the failure ("!"): their
// callers share the load's outcome, as a flight's do in one process.
//
// ARGV: token, holdoff_ms. Reply: {the value's consecutive failures, its
// remaining time to live in ms} ({0, 0} when nothing is stored).
var FetchFail = define("cachewatch_fetch_fail", wakeWaiters+`
local n, ttl = 0, 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  n = redis.call('HINCRBY', KEYS[1], 'e', 1)
  ttl = redis.call('PTTL', KEYS[1])
end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  if tonumber(ARGV[2]) > 0 then
    redis.call('SET', KEYS[2], '!' .. ARGV[1], 'PX', ARGV[2])
  else
    redis.call('DEL', KEYS[2])
  end
  wake('!')
end
return {n, ttl}
`)

// FetchRelease releases a refresh claim if the caller still owns it: used
// for claims granted to a read the caller had already abandoned (Redis was
// stalled and ran the read only later).
//
// ARGV: token. Reply: 1 if released, else 0.
var FetchRelease = define("cachewatch_fetch_release", `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// FetchSet stores a value given by the caller (Cache.Set, no loader) and
// deletes the refresh claim, so that a load in flight, which read the
// source before this write, is not stored over it (FetchWrite requires the
// claim); then it wakes the waiters.
//
// ARGV: v, f, h, pexpire_ms. Reply: 1.
var FetchSet = define("cachewatch_fetch_set", wakeWaiters+`
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'f', ARGV[2], 'h', ARGV[3], 'd', 0, 'n', '0', 'e', 0)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('DEL', KEYS[2])
wake('1')
return 1
`)
