// Package luascript holds the Lua scripts of cachewatch's own client, by name.
//
// The instrument package runs them (go-redis Script: EVALSHA with EVAL
// fallback on NOSCRIPT); the hooks package recognises them on the wire by SHA
// and labels their latency with the name. Each script is defined once here so
// the two can never disagree.
package luascript

import (
	"crypto/sha1"
	"encoding/hex"

	"github.com/redis/go-redis/v9"
)

// Script is a named Lua script.
type Script struct {
	Name string
	Src  string
	SHA  string
	*redis.Script
}

var all []*Script

// define registers a script under name; call it from package-level vars only.
func define(name, src string) *Script {
	sum := sha1.Sum([]byte(src))
	s := &Script{Name: name, Src: src, SHA: hex.EncodeToString(sum[:]), Script: redis.NewScript(src)}
	all = append(all, s)
	return s
}

// All returns every script of cachewatch's client.
func All() []*Script { return append([]*Script(nil), all...) }
