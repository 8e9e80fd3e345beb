package keygroup

import (
	"hash/maphash"
	"math/bits"
	"sync/atomic"
)

// Sizes of the learnt structure. Every table is bounded, so a classifier's
// memory is too, whatever the keyspace (about a megabyte at most).
const (
	// generation is how many sketches (tokens, positions and groups still
	// being counted) each of the two generations holds: a sketch not
	// touched for a whole generation is forgotten.
	generation = 4096
	// promotedSlots holds the names learnt (half of it at most);
	// variableSlots the positions found to hold names; refusedSlots the
	// groups refused by the cap.
	promotedSlots = 4096
	variableSlots = 1024
	refusedSlots  = 1024
	// seenSlots remembers the keys learnt in the current epoch.
	seenSlots = 4096
)

// Kinds of sketch, mixed into their hashes so they never collide.
const (
	kindColumn = 0x9e3779b97f4a7c15
	kindGroup  = 0xc2b2ae3d27d4eb4f
	// kindWordNum marks the text of a word followed by a number.
	kindWordNum = 0x165667b19e3779f9
)

// learner is what a classifier learnt of the keyspace's structure. The
// sets are read without locking; counts and every write are guarded by the
// classifier's mutex.
type learner struct {
	// epoch counts the names learnt and positions found to hold names:
	// what changes the group of keys already seen. changes also counts
	// the groups exported (Classifier.Epoch).
	epoch, changes atomic.Uint64
	// promoted are the names kept literal, variable the positions (shape
	// and index) whose other names are "*", refused the groups the cap
	// turned away: hashes.
	promoted, variable, refused hashSet
	// seen remembers, per slot, a key learnt in the current epoch:
	// learning it again would change nothing.
	seen   [seenSlots]atomic.Uint64
	counts sketches
	// seed keys the hashes of keys, tokens and groups (per classifier:
	// only its own tables hold them).
	seed maphash.Seed
}

func newLearner() *learner {
	return &learner{
		promoted: newHashSet(promotedSlots), variable: newHashSet(variableSlots), refused: newHashSet(refusedSlots),
		counts: sketches{cur: map[uint64]sketch{}, prev: map[uint64]sketch{}}, seed: maphash.MakeSeed(),
	}
}

func seenTag(kh, epoch uint64) uint64 { return (kh ^ epoch*kindColumn) | 1 }

func (l *learner) wasSeen(kh, epoch uint64) bool {
	return l.seen[kh%seenSlots].Load() == seenTag(kh, epoch)
}

func (l *learner) markSeen(kh uint64) {
	l.seen[kh%seenSlots].Store(seenTag(kh, l.epoch.Load()))
}

// classifyLearnt classifies a key by the learnt structure, learning from
// it unless that would change nothing: the key was learnt in this epoch,
// or every name in it is learnt and its group exported.
func (c *Classifier) classifyLearnt(sp *split, buf []byte) string {
	l := c.learn
	var d decisions
	n := c.write(sp, buf, &d)
	if d.settled() {
		if g, ok := (*c.derived.Load())[string(buf[:n])]; ok {
			return g
		}
	}
	kh := maphash.String(l.seed, sp.key)
	if l.wasSeen(kh, l.epoch.Load()) {
		return c.known(buf[:n], d.decided)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.learnFrom(sp, kh, buf)
}

// known returns the group of a key already learnt: its group if exported,
// Other otherwise (counted as an overflow when the cap refused it).
func (c *Classifier) known(group []byte, decided bool) string {
	if !decided {
		return Other
	}
	if g, ok := (*c.derived.Load())[string(group)]; ok {
		return g
	}
	if c.learn.refused.has(maphash.Bytes(c.learn.seed, group)) {
		c.overflowed()
	}
	return Other
}

// learnFrom counts the key in the sketches of its names, positions and
// group, learns what reached MinKeys, and classifies it. It runs under
// c.mu.
func (c *Classifier) learnFrom(sp *split, kh uint64, buf []byte) string {
	l := c.learn
	bit := uint8(kh >> 56) // the key's bit in every sketch: a key counted twice is one key
	var d decisions
	c.write(sp, buf, &d)
	changed := false
	for i := 0; i < sp.n; i++ {
		if sp.toks[i].kind == tokEmpty {
			continue
		}
		if !d.literal(i) && sp.toks[i].kind != tokID && l.counts.add(d.name[i], bit) >= c.minKeys && l.promoted.add(d.name[i]) {
			l.counts.forget(d.name[i])
			changed = true
		}
		col := d.column[i] ^ kindColumn
		if !l.variable.has(d.column[i]) && l.counts.add(col, uint8(d.text[i]>>56)) >= c.minKeys && l.variable.add(d.column[i]) {
			l.counts.forget(col)
			changed = true
		}
	}
	if changed {
		l.epoch.Add(1)
		l.changes.Add(1)
	}
	n := c.write(sp, buf, &d)
	defer l.markSeen(kh)
	if !d.decided {
		return Other
	}
	group := buf[:n]
	if g, ok := (*c.derived.Load())[string(group)]; ok {
		return g
	}
	gh := maphash.Bytes(l.seed, group)
	switch {
	case l.refused.has(gh):
		c.overflowed()
		return Other
	case l.counts.add(gh^kindGroup, bit) < c.minKeys:
		return Other
	}
	l.counts.forget(gh ^ kindGroup)
	g := c.admit(group)
	if g == Other {
		l.refused.add(gh)
	} else {
		l.changes.Add(1)
	}
	return g
}

// decisions are the hashes of a key's tokens and positions, and whether
// each of its names is known: filled by write for a learning classifier.
type decisions struct {
	// name is the hash of each token with its shape and position, column
	// that of the shape and position alone, text that of the token alone.
	name, column, text [maxTokens]uint64
	// literalBits holds a bit per token written as itself, names a bit per
	// token that is a name (neither an identifier nor empty).
	literalBits, names uint32
	// decided is false when a name is neither learnt nor in a position of
	// names: the key's group is not known yet.
	decided bool
}

func (d *decisions) literal(i int) bool { return d.literalBits&(1<<i) != 0 }

// settled reports whether there is nothing left to learn from the key's
// names: each is learnt (or an identifier).
func (d *decisions) settled() bool { return d.decided && d.names == d.literalBits }

// write writes the group of the key split in sp into buf (len MaxGroupLen)
// and returns its length. With d (a learning classifier) a name is written
// only once learnt, "*" in a position of names; d records the hashes and
// whether every name was decided. Without d every name is written.
func (c *Classifier) write(sp *split, buf []byte, d *decisions) int {
	w := groupWriter{dst: buf}
	var shape uint64
	if d != nil {
		shape = shapeHash(sp)
		d.decided, d.literalBits, d.names = true, 0, 0
	}
	for i := 0; i < sp.n; i++ {
		t := sp.toks[i]
		text := sp.key[t.start:t.end]
		switch {
		case t.kind == tokEmpty:
		case t.kind == tokID:
			if d != nil {
				d.hash(c.learn.seed, i, shape, t, text)
			}
			w.star()
		case d == nil || c.decide(d, i, shape, t, text):
			w.str(text)
			if t.kind == tokWordNum {
				w.star()
			}
		default:
			w.star()
		}
		if t.sep != 0 {
			w.byte(t.sep)
		}
	}
	if sp.more || w.n == 0 {
		w.star()
	}
	return w.n
}

// hash records the hashes of token i: of its text (a word followed by a
// number as its word and "*"), of its position in the shape, and of both.
func (d *decisions) hash(seed maphash.Seed, i int, shape uint64, t token, text string) {
	th := maphash.String(seed, text)
	if t.kind == tokWordNum {
		th = mix(th ^ kindWordNum)
	}
	d.text[i] = th
	d.column[i] = mix(fnvByte(shape, byte(i)))
	d.name[i] = mix(d.column[i] ^ d.text[i])
}

// decide reports whether name i is written as itself: it is learnt.
// Otherwise it is "*" in a position of names, and undecided (d.decided
// false) elsewhere.
func (c *Classifier) decide(d *decisions, i int, shape uint64, t token, text string) bool {
	d.hash(c.learn.seed, i, shape, t, text)
	d.names |= 1 << i
	if c.learn.promoted.has(d.name[i]) {
		d.literalBits |= 1 << i
		return true
	}
	if !c.learn.variable.has(d.column[i]) {
		d.decided = false
	}
	return false
}

// shapeHash is the hash of a key's shape: its separators, empty segments
// and token count.
func shapeHash(sp *split) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < sp.n; i++ {
		t := sp.toks[i]
		empty := byte(0)
		if t.kind == tokEmpty {
			empty = 1
		}
		h = fnvByte(fnvByte(h, t.sep), empty)
	}
	more := byte(0)
	if sp.more {
		more = 1
	}
	return mix(fnvByte(fnvByte(h, byte(sp.n)), more))
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvByte(h uint64, b byte) uint64 { return (h ^ uint64(b)) * fnvPrime }

// mix is the splitmix64 finaliser: every bit of the result depends on
// every bit of h, so its top and bottom bits can be used apart.
func mix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

// sketch records which of 256 buckets of key (or token) hashes were seen:
// its population count never exceeds the distinct keys counted, so
// reaching MinKeys proves that many distinct keys, whatever was repeated.
type sketch [4]uint64

func (s *sketch) set(bit uint8) { s[bit>>6] |= 1 << (bit & 63) }

func (s *sketch) count() int {
	return bits.OnesCount64(s[0]) + bits.OnesCount64(s[1]) + bits.OnesCount64(s[2]) + bits.OnesCount64(s[3])
}

// sketches holds the sketches still being counted in two generations: when
// the current one is full the previous one is dropped, so what is not
// touched for a generation is forgotten and memory stays bounded. Maps are
// cleared, not reallocated: their memory is reused.
type sketches struct {
	cur, prev map[uint64]sketch
}

// add sets bit in the sketch of h and returns its count.
func (s *sketches) add(h uint64, bit uint8) int {
	sk, ok := s.cur[h]
	if !ok {
		if sk, ok = s.prev[h]; ok {
			delete(s.prev, h)
		}
		if len(s.cur) >= generation {
			s.cur, s.prev = s.prev, s.cur
			clear(s.cur)
		}
	}
	sk.set(bit)
	s.cur[h] = sk
	return sk.count()
}

// forget drops the sketch of h: what it counted is decided.
func (s *sketches) forget(h uint64) {
	delete(s.cur, h)
	delete(s.prev, h)
}

// hashSet is an insert-only set of hashes read without locking (open
// addressing over atomic words; 0 marks an empty slot). It holds at most
// half its slots; add reports false once full.
type hashSet struct {
	slots []atomic.Uint64
	n     int // guarded by the classifier's mutex
}

func newHashSet(size int) hashSet { return hashSet{slots: make([]atomic.Uint64, size)} }

func (s *hashSet) has(h uint64) bool {
	_, found := s.find(h)
	return found
}

func (s *hashSet) add(h uint64) bool {
	i, found := s.find(h)
	if found {
		return true
	}
	if s.n >= len(s.slots)/2 {
		return false
	}
	s.slots[i].Store(h | 1)
	s.n++
	return true
}

// find returns the slot holding h, or the empty slot where it would go.
func (s *hashSet) find(h uint64) (uint64, bool) {
	h |= 1
	mask := uint64(len(s.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch s.slots[i].Load() {
		case h:
			return i, true
		case 0:
			return i, false
		}
	}
}
