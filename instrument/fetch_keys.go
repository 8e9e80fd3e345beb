package instrument

import (
	"math/rand/v2"
	"strconv"
	"strings"
)

// keys are the Redis names of one cached key, and the wake channel its
// reads register when this process waits for another's load ("" for none).
type keys struct {
	value, claim, waiters string
	wake                  string
}

// keysFor names key's value, claim and queue of waiters in Redis, in one
// allocation (a flight names its keys once, and in a stampede every process
// starts its flights at once): the value's name is the start of the
// claim's.
func keysFor(key string) keys {
	t := hashTag(key)
	n := len(t.prefix) + len(t.open) + len(t.id) + len(t.end)
	all := t.prefix + t.open + t.id + t.end + claimSuffix + t.prefix + t.open + t.id + t.end + waitersSuffix
	claim := all[:n+len(claimSuffix)]
	return keys{value: claim[:n], claim: claim, waiters: all[len(claim):]}
}

// tagged is a key split around the hash tag its Redis names carry:
// prefix, open, id, end make the stored name.
type tagged struct{ prefix, open, id, end string }

// hashTag splits key around the hash tag its Redis names carry: a key
// with a tag of its own keeps it (prefix is the whole key); otherwise the
// tag holds what follows the first colon (the whole key if there is none),
// so value and claim share a slot, keys spread over slots by their IDs,
// and the prefix stays visible to key-group classification in hooks and
// the exporter ("product:{42}" is "product:*", where "{product:42}" would
// be "*").
func hashTag(key string) tagged {
	if hashTagged(key) {
		return tagged{prefix: key}
	}
	if i := strings.IndexByte(key, ':'); i >= 0 && i < len(key)-1 {
		return tagged{key[:i+1], "{", key[i+1:], "}"}
	}
	return tagged{"", "{", key, "}"}
}

// claimSuffix follows a cached value's name in its refresh claim's name,
// waitersSuffix in the name of the queue of processes waiting for the claim
// holder's value (a sorted set that lives no longer than a claim).
const (
	claimSuffix   = ":claim"
	waitersSuffix = ":waitq"
)

// hashTagged reports whether Redis Cluster would hash only part of key.
func hashTagged(key string) bool {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return false
	}
	end := strings.IndexByte(key[open+1:], '}')
	return end > 0
}

// claimToken returns the value of a refresh claim offered by this client:
// its identity around a random token (lockholder), followed by the channel
// whose subscription shows that the holder's process is alive, when there
// is one ("<value>@<holder>"). One allocation.
func (c *Client) claimToken(holder string) string {
	var rnd [26]byte // two uint64s in base 36, at most 13 digits each
	r := strconv.AppendUint(rnd[:0], rand.Uint64(), 36)
	r = strconv.AppendUint(r, rand.Uint64(), 36)
	var buf [256]byte
	b := c.holder.Append(buf[:0], string(r), c.now())
	if holder != "" {
		b = append(append(b, '@'), holder...)
	}
	return string(b)
}
