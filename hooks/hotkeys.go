package hooks

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// hotKeys keeps, per key group, a space-saving top-K sketch (Metwally et
// al., 2005) of the most requested keys (cache reads) and of the most
// contended ones (lock attempts answered busy). Memory is bounded by
// groups × 2 × K entries. It is opt-in: it takes a lock per counted
// command and copies a key when it enters a sketch.
type hotKeys struct {
	k      int
	mu     sync.Mutex
	groups map[string]*hotGroup
}

type hotGroup struct{ requested, contended *spaceSaving }

func newHotKeys(k int) *hotKeys { return &hotKeys{k: k, groups: map[string]*hotGroup{}} }

func (h *hotKeys) group(g string) *hotGroup {
	hg, ok := h.groups[g]
	if !ok {
		hg = &hotGroup{requested: newSpaceSaving(h.k), contended: newSpaceSaving(h.k)}
		h.groups[g] = hg
	}
	return hg
}

func (h *hotKeys) requested(group, key string) {
	h.mu.Lock()
	h.group(group).requested.add(key)
	h.mu.Unlock()
}

func (h *hotKeys) contended(group, key string) {
	h.mu.Lock()
	h.group(group).contended.add(key)
	h.mu.Unlock()
}

// spaceSaving is a space-saving sketch of capacity k: every key whose true
// count exceeds n/k is in it, and each count overestimates by at most Err.
type spaceSaving struct {
	k     int
	n     uint64
	items map[string]*HotKey
}

func newSpaceSaving(k int) *spaceSaving {
	return &spaceSaving{k: k, items: make(map[string]*HotKey, k)}
}

func (s *spaceSaving) add(key string) {
	s.n++
	if it, ok := s.items[key]; ok {
		it.Count++
		return
	}
	if len(s.items) < s.k {
		k := strings.Clone(key) // key may alias a caller's buffer
		s.items[k] = &HotKey{Key: k, Count: 1}
		return
	}
	var min *HotKey
	for _, it := range s.items { // k is small; a heap is not worth it here
		if min == nil || it.Count < min.Count {
			min = it
		}
	}
	delete(s.items, min.Key)
	k := strings.Clone(key)
	s.items[k] = &HotKey{Key: k, Count: min.Count + 1, Err: min.Count}
}

func (s *spaceSaving) top() []HotKey {
	out := make([]HotKey, 0, len(s.items))
	for _, it := range s.items {
		out = append(out, *it)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// HotKey is one entry of a top-K sketch: Count is an upper bound of the
// key's true count, at most Err above it.
type HotKey struct {
	Key   string `json:"key"`
	Count uint64 `json:"count"`
	Err   uint64 `json:"error"`
}

// HotGroup is the top-K view of one key group.
type HotGroup struct {
	Group     string   `json:"group"`
	Requested []HotKey `json:"requested"`
	Contended []HotKey `json:"contended"`
}

// HotKeys returns the most requested and most contended keys per key group,
// groups sorted by name; nil unless Options.HotKeys was set.
func (h *Hook) HotKeys() []HotGroup {
	if h.hot == nil {
		return nil
	}
	h.hot.mu.Lock()
	defer h.hot.mu.Unlock()
	out := make([]HotGroup, 0, len(h.hot.groups))
	for g, hg := range h.hot.groups {
		out = append(out, HotGroup{Group: g, Requested: hg.requested.top(), Contended: hg.contended.top()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

// HotKeysHandler serves HotKeys as JSON. It shows raw keys: mount it on a
// debug listener only, never next to public endpoints.
func (h *Hook) HotKeysHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.hot == nil {
			http.Error(w, "hot-key view is off (hooks.Options.HotKeys)", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(h.HotKeys())
	})
}
