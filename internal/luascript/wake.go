package luascript

import (
	"strconv"
	"strings"
)

// Wake is a wake-up published by the write scripts: the stored key whose
// waiters it wakes, and its payload.
type Wake struct {
	Stored, Payload string
}

// ParseWake reads a wake-up (wakeWaiters: "<len>:<stored key><payload>",
// the key length-prefixed because a key may hold any byte); ok is false for
// a malformed message.
func ParseWake(msg string) (w Wake, ok bool) {
	n, rest, ok := strings.Cut(msg, ":")
	size, err := strconv.Atoi(n)
	if !ok || err != nil || size < 0 || size > len(rest) {
		return Wake{}, false
	}
	return Wake{Stored: rest[:size], Payload: rest[size:]}, true
}

// WakeFailed is the payload of the wake-up FetchFail publishes: the load the
// waiters waited for failed.
const WakeFailed = "!"

// Carried is a value carried by a wake-up's payload (FetchWrite's
// "=f:h:n:v").
type Carried struct {
	FreshUntil, HardUntil int64 // unix ms
	Negative              bool  // a cached "not found"
	Value                 string
}

// ParseCarried reads a wake-up's payload; ok is false for a bare wake-up
// ("1": the write was refused or its value too large to carry) or a
// malformed one.
func ParseCarried(payload string) (c Carried, ok bool) {
	rest, ok := strings.CutPrefix(payload, "=")
	if !ok {
		return c, false
	}
	parts := strings.SplitN(rest, ":", 4)
	if len(parts) != 4 {
		return c, false
	}
	var err1, err2 error
	c.FreshUntil, err1 = strconv.ParseInt(parts[0], 10, 64)
	c.HardUntil, err2 = strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return Carried{}, false
	}
	c.Negative, c.Value = parts[2] == "1", parts[3]
	return c, true
}
