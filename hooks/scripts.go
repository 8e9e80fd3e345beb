package hooks

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cachewatch/cachewatch/internal/luascript"
)

// UnknownScript is the script label of scripts the hook cannot name. Raw
// SHAs never become labels: their number is unbounded.
const UnknownScript = "unknown"

// ErrBadScript is returned by New for a Script entry it cannot use.
var ErrBadScript = errors.New("hooks: bad script")

// Role tells the hook what a script's reply means for locks.
type Role uint8

// Script roles. The hook reads a script's first key (KEYS[1]) as the lock key
// and classifies it into a key group.
const (
	// RoleNone: the script is only timed under its name.
	RoleNone Role = iota
	// RoleAcquire: a lock attempt; a nil reply means busy (held by another
	// owner), any other reply acquired. ARGV[1] is the owner token.
	RoleAcquire
	// RoleRelease: an owner-checked release that answers 0 when it did not
	// delete the lock, whether the lock had expired or belonged to someone
	// else (bsm/redislock's release, most hand-written ones). The wire
	// cannot tell the two apart, so the loss is counted as
	// expired_or_not_owner; a reply of -1 is counted as expired.
	RoleRelease
	// RoleExtend: an owner-checked extension; a reply of 0 means the lock
	// was lost before it could be renewed (renew_failed).
	RoleExtend
	// RoleReleaseTellsExpiry: an owner-checked release whose reply tells
	// the two losses apart: -1 when the lock was gone (expired), 0 when
	// someone else owned it (not_owner). redsync's release does this.
	RoleReleaseTellsExpiry
)

// releases reports an owner-checked release role.
func (r Role) releases() bool { return r == RoleRelease || r == RoleReleaseTellsExpiry }

// Script names a Lua script or a Redis function for the hook. Set at least
// one of Src, SHA and Function.
type Script struct {
	// Name is the script label; bounded by configuration.
	Name string
	// Src is the script body as sent by EVAL; its SHA1 is registered too.
	Src string
	// SHA is the hex SHA1 of the body as sent by EVALSHA.
	SHA string
	// Function is a function name as sent by FCALL.
	Function string
	// Role says what the reply means for locks (default RoleNone).
	Role Role
}

// scriptInfo is what the hook keeps per registered script.
type scriptInfo struct {
	name     string
	role     Role
	dur      [numScriptCmds]lazyObserver
	noscript lazyCounter
}

// maxLearnedBodies bounds the EVAL bodies the registry remembers after
// hashing them (see learn).
const maxLearnedBodies = 256

// scriptRegistry maps script bodies, SHAs and function names to scripts.
type scriptRegistry struct {
	bySrc   map[string]*scriptInfo
	learned atomic.Pointer[map[string]*scriptInfo] // EVAL bodies seen, copy-on-write
	mu      sync.Mutex
	bySHA   map[string]*scriptInfo
	shas    shaTable // bySHA, for lookups
	byFunc  map[string]*scriptInfo
	unknown *scriptInfo
}

// shaTable finds a script by SHA without hashing it: a SHA is random
// already, so its first hex digits index an open-addressed table, and a
// slot holds the SHA inline next to its script, so a lookup reads one cache
// line besides the id. Built at New, read-only afterwards.
type shaTable struct {
	slots []shaSlot // len is a power of two, at least twice the SHAs
}

type shaSlot struct {
	sha  [40]byte // lower-case hex
	info *scriptInfo
	_    [16]byte // a slot per cache line
}

func newSHATable(bySHA map[string]*scriptInfo) shaTable {
	n := 64
	for n < 2*len(bySHA) {
		n *= 2
	}
	t := shaTable{slots: make([]shaSlot, n)}
	for sha, info := range bySHA {
		i := t.home(sha)
		for t.slots[i].info != nil {
			i = (i + 1) & (n - 1)
		}
		copy(t.slots[i].sha[:], sha)
		t.slots[i].info = info
	}
	return t
}

// home is the first slot to probe for a 40-digit hex SHA (either case).
func (t shaTable) home(sha string) int {
	v := 0
	for i := 0; i < 4; i++ {
		v = v<<4 | int(hexDigit(sha[i]))
	}
	return v & (len(t.slots) - 1)
}

// hexDigit is the value of a hex digit; other bytes give some value, which
// only makes their lookup fail.
func hexDigit(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return (c | 0x20) - 'a' + 10
}

// find returns the script of a SHA as sent (either case), or nil.
func (t shaTable) find(id string) *scriptInfo {
	if len(id) != 40 {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.home(id); t.slots[i].info != nil; i = (i + 1) & mask {
		if string(t.slots[i].sha[:]) == id {
			return t.slots[i].info
		}
	}
	var buf [40]byte // an upper-case SHA: rare, so only now
	lowerASCII(buf[:], id)
	if string(buf[:]) == id {
		return nil
	}
	for i := t.home(id); t.slots[i].info != nil; i = (i + 1) & mask {
		if t.slots[i].sha == buf {
			return t.slots[i].info
		}
	}
	return nil
}

// Scripts of common lock libraries, byte for byte as they send them, so their
// SHAs match. Their replies follow the Role conventions above.
const (
	// github.com/bsm/redislock v0.9.
	redislockObtain = `
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[3]) then return redis.status_reply("OK") end

local offset = tonumber(ARGV[2])
if redis.call("getrange", KEYS[1], 0, offset-1) == string.sub(ARGV[1], 1, offset) then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[3]) end
`
	redislockRefresh = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`
	redislockRelease = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`
	redislockPTTL    = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pttl", KEYS[1]) else return -3 end`

	// github.com/go-redsync/redsync/v4 (v4.11 to v4.18).
	redsyncDelete = `
	local val = redis.call("GET", KEYS[1])
	if val == ARGV[1] then
		return redis.call("DEL", KEYS[1])
	elseif val == false then
		return -1
	else
		return 0
	end
`
	redsyncTouchWithSetNX = `
	if redis.call("GET", KEYS[1]) == ARGV[1] then
		return redis.call("PEXPIRE", KEYS[1], ARGV[2])
	elseif redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2], "NX") then
		return 1
	else
		return 0
	end
`
	redsyncTouch = `
	if redis.call("GET", KEYS[1]) == ARGV[1] then
		return redis.call("PEXPIRE", KEYS[1], ARGV[2])
	else
		return 0
	end
`
)

// LockLibraryScripts returns the owner-checked lock scripts of bsm/redislock
// and redsync that every hook recognises.
func LockLibraryScripts() []Script {
	return []Script{
		{Name: "redislock_obtain", Src: redislockObtain, Role: RoleAcquire},
		{Name: "redislock_refresh", Src: redislockRefresh, Role: RoleExtend},
		{Name: "redislock_release", Src: redislockRelease, Role: RoleRelease},
		{Name: "redislock_pttl", Src: redislockPTTL},
		{Name: "redsync_release", Src: redsyncDelete, Role: RoleReleaseTellsExpiry},
		{Name: "redsync_extend", Src: redsyncTouch, Role: RoleExtend},
		{Name: "redsync_extend_setnx", Src: redsyncTouchWithSetNX, Role: RoleExtend},
	}
}

// cachewatchScripts lists cachewatch's own scripts. Their outcomes are
// counted by the instrumented client, so the hook only names them.
func cachewatchScripts() []Script {
	own := luascript.All()
	out := make([]Script, len(own))
	for i, s := range own {
		out[i] = Script{Name: s.Name, Src: s.Src}
	}
	return out
}

func sha1Hex(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}

// newScriptRegistry registers user scripts first, so that they win over the
// built-in ones on a clash, then cachewatch's and the lock libraries'.
func newScriptRegistry(user []Script, newInfo func(name string, role Role) *scriptInfo) (*scriptRegistry, error) {
	r := &scriptRegistry{
		bySrc:   map[string]*scriptInfo{},
		bySHA:   map[string]*scriptInfo{},
		byFunc:  map[string]*scriptInfo{},
		unknown: newInfo(UnknownScript, RoleNone),
	}
	r.learned.Store(&map[string]*scriptInfo{})
	for i, s := range user {
		if err := validScript(s); err != nil {
			return nil, fmt.Errorf("%w %d (%q): %v", ErrBadScript, i, s.Name, err)
		}
		r.add(s, newInfo)
	}
	for _, s := range append(cachewatchScripts(), LockLibraryScripts()...) {
		r.add(s, newInfo)
	}
	r.shas = newSHATable(r.bySHA)
	return r, nil
}

func validScript(s Script) error {
	switch {
	case s.Name == "" || len(s.Name) > 64:
		return errors.New("name must be 1 to 64 bytes")
	case s.Src == "" && s.SHA == "" && s.Function == "":
		return errors.New("one of Src, SHA or Function is required")
	case s.SHA != "" && !isSHA1Hex(s.SHA):
		return errors.New("SHA must be 40 hex digits")
	case s.Role > RoleReleaseTellsExpiry:
		return fmt.Errorf("unknown role %d", s.Role)
	}
	return nil
}

func isSHA1Hex(s string) bool {
	if len(s) != 40 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i] | 0x20 // lower case
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// add registers s unless its body, SHA or function name is taken already.
func (r *scriptRegistry) add(s Script, newInfo func(string, Role) *scriptInfo) {
	info := newInfo(s.Name, s.Role)
	if s.Src != "" {
		if _, dup := r.bySrc[s.Src]; !dup {
			r.bySrc[s.Src] = info
		}
		if s.SHA == "" {
			s.SHA = sha1Hex(s.Src)
		}
	}
	if s.SHA != "" {
		sha := strings.ToLower(s.SHA)
		if _, dup := r.bySHA[sha]; !dup {
			r.bySHA[sha] = info
		}
	}
	if s.Function != "" {
		if _, dup := r.byFunc[s.Function]; !dup {
			r.byFunc[s.Function] = info
		}
	}
}

// lookup returns the script a script command names by id (body, SHA or
// function name), or the unknown script.
func (r *scriptRegistry) lookup(sc scriptCmd, id string) *scriptInfo {
	switch {
	case sc.bySHA():
		if s := r.shas.find(id); s != nil {
			return s
		}
		return r.unknown
	case sc.byFunction():
		if s, ok := r.byFunc[id]; ok {
			return s
		}
		return r.unknown
	}
	if s, ok := r.bySrc[id]; ok {
		return s
	}
	return r.learn(id)
}

// learn names an EVAL body that was registered by SHA only (go-redis's
// Script.Run falls back to EVAL with the body after NOSCRIPT). Hashing costs
// a little, so the answer, named or unknown, is remembered for up to
// maxLearnedBodies bodies.
func (r *scriptRegistry) learn(body string) *scriptInfo {
	if s, ok := (*r.learned.Load())[body]; ok {
		return s
	}
	s, ok := r.bySHA[sha1Hex(body)]
	if !ok {
		s = r.unknown
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.learned.Load()
	if len(old) < maxLearnedBodies {
		next := make(map[string]*scriptInfo, len(old)+1)
		for k, v := range old {
			next[k] = v
		}
		next[strings.Clone(body)] = s
		r.learned.Store(&next)
	}
	return s
}
