package hooks

import (
	"strings"

	"go.opentelemetry.io/otel/metric"
)

// otherCommand is the label of every command outside knownCommands, so that
// the command label stays bounded whatever a client sends.
const otherCommand = "other"

// knownCommands are the commands that get their own command label (lower
// case). Module commands and rare admin commands fold into "other".
var knownCommands = []string{
	"append", "auth", "bitcount", "bitfield", "bitop", "bitpos", "blmove", "blpop", "brpop", "brpoplpush",
	"bzpopmax", "bzpopmin", "client", "cluster", "command", "config", "copy", "dbsize", "decr", "decrby",
	"del", "discard", "dump", "echo", "eval", "eval_ro", "evalsha", "evalsha_ro", "exec", "exists",
	"expire", "expireat", "expiretime", "fcall", "fcall_ro", "flushall", "flushdb", "function", "geoadd", "geodist",
	"geohash", "geopos", "geosearch", "get", "getbit", "getdel", "getex", "getrange", "getset", "hdel",
	"hello", "hexists", "hexpire", "hget", "hgetall", "hgetdel", "hgetex", "hincrby", "hincrbyfloat", "hkeys",
	"hlen", "hmget", "hmset", "hpexpire", "hscan", "hset", "hsetex", "hsetnx", "hstrlen", "hvals",
	"incr", "incrby", "incrbyfloat", "info", "keys", "lcs", "lindex", "linsert", "llen", "lmove",
	"lmpop", "lpop", "lpos", "lpush", "lpushx", "lrange", "lrem", "lset", "ltrim", "memory",
	"mget", "mset", "msetnx", "multi", "object", "persist", "pexpire", "pexpireat", "pexpiretime", "pfadd",
	"pfcount", "pfmerge", "ping", "psetex", "psubscribe", "pttl", "publish", "pubsub", "punsubscribe", "quit",
	"randomkey", "readonly", "readwrite", "rename", "renamenx", "restore", "rpop", "rpoplpush", "rpush", "rpushx",
	"sadd", "scan", "scard", "script", "sdiff", "sdiffstore", "select", "set", "setbit", "setex",
	"setnx", "setrange", "sinter", "sintercard", "sinterstore", "sismember", "slowlog", "smembers", "smismember", "smove",
	"sort", "sort_ro", "spop", "spublish", "srandmember", "srem", "sscan", "ssubscribe", "strlen", "subscribe",
	"sunion", "sunionstore", "sunsubscribe", "time", "touch", "ttl", "type", "unlink", "unsubscribe", "unwatch",
	"wait", "waitaof", "watch", "xack", "xadd", "xautoclaim", "xclaim", "xdel", "xgroup", "xinfo",
	"xlen", "xpending", "xrange", "xread", "xreadgroup", "xrevrange", "xtrim", "zadd", "zcard", "zcount",
	"zdiff", "zincrby", "zinter", "zintercard", "zinterstore", "zmpop", "zmscore", "zpopmax", "zpopmin", "zrandmember",
	"zrange", "zrangebylex", "zrangebyscore", "zrangestore", "zrank", "zrem", "zremrangebylex", "zremrangebyrank", "zremrangebyscore", "zrevrange",
	"zrevrangebylex", "zrevrangebyscore", "zrevrank", "zscan", "zscore", "zunion", "zunionstore",
}

// hotCommands are looked up by a switch before the map (Hook.command); the
// order matches that switch.
var hotCommands = [...]string{"get", "set", "evalsha", "mget", "hget"}

// cmdKind says what, beyond timing, the hook reads from a command.
type cmdKind uint8

const (
	kindPlain  cmdKind = iota
	kindGet            // GET, GETEX: one key, nil reply is a miss
	kindHGet           // HGET: one hash key, nil reply is a miss
	kindMGet           // MGET: one reply per key
	kindHMGet          // HMGET: one hash key, one reply per field
	kindSet            // SET: a lock attempt when it has NX
	kindSetNX          // legacy SETNX: always a lock attempt
	kindScript         // EVAL, EVALSHA, their _RO forms, FCALL, FCALL_RO
	kindSetup          // HELLO, AUTH, SELECT, READONLY: connection setup (isSetup)
	kindClient         // CLIENT: connection setup for some subcommands (isSetup)
)

// scriptCmd indexes the command label of ScriptDuration.
type scriptCmd uint8

const (
	scriptEval scriptCmd = iota
	scriptEvalSHA
	scriptEvalRO
	scriptEvalSHARO
	scriptFCall
	scriptFCallRO
	numScriptCmds
)

var scriptCmdNames = [numScriptCmds]string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}

// bySHA reports whether the command names its script by SHA1.
func (s scriptCmd) bySHA() bool { return s == scriptEvalSHA || s == scriptEvalSHARO }

// byFunction reports whether the command names a function (FCALL).
func (s scriptCmd) byFunction() bool { return s == scriptFCall || s == scriptFCallRO }

func kindOf(name string) (cmdKind, scriptCmd) {
	switch name {
	case "get", "getex":
		return kindGet, 0
	case "hget":
		return kindHGet, 0
	case "mget":
		return kindMGet, 0
	case "hmget":
		return kindHMGet, 0
	case "set":
		return kindSet, 0
	case "setnx":
		return kindSetNX, 0
	case "hello", "auth", "select", "readonly":
		return kindSetup, 0
	case "client":
		return kindClient, 0
	}
	for i, n := range scriptCmdNames {
		if n == name {
			return kindScript, scriptCmd(i)
		}
	}
	return kindPlain, 0
}

// setupSubcommands are the CLIENT subcommands of a connection's setup.
var setupSubcommands = [...]string{"setinfo", "setname", "tracking", "maint_notifications"}

// isSetup reports a command of a connection's setup: go-redis's handshake,
// which it sends through the hooks when it opens a connection (HELLO, or
// AUTH when HELLO is unknown; SELECT, READONLY, CLIENT SETNAME and CLIENT
// TRACKING as configured; CLIENT MAINT_NOTIFICATIONS; CLIENT SETINFO).
// kind is the command's (kindOf).
func isSetup(kind cmdKind, args []any) bool {
	switch kind {
	case kindSetup:
		return true
	case kindClient:
		if len(args) < 2 {
			return false
		}
		sub, _ := args[1].(string)
		for _, s := range setupSubcommands {
			if strings.EqualFold(sub, s) {
				return true
			}
		}
	}
	return false
}

// command is what the hook keeps per command label: its kind and its
// prebound metric children.
type command struct {
	name   string
	kind   cmdKind
	script scriptCmd
	dur    lazyObserver
	errs   [numErrClasses]lazyCounter
	span   spanInfo
	// semconvOK records a successful command on the semantic conventions'
	// histogram (nil without it).
	semconvOK []metric.RecordOption
}

// lowerASCII writes the lower-case form of s into buf and returns its
// length, or -1 when s does not fit; used to look up commands sent in upper
// case without allocating.
func lowerASCII(buf []byte, s string) int {
	if len(s) > len(buf) {
		return -1
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return len(s)
}
