package keygroup

import "strings"

// maxTokens bounds the positions of a key's shape; the rest of a longer key
// is one "*".
const maxTokens = 16

// isSeparator reports whether b separates the segments of a key. '-' and '_'
// are not separators ("job-result" is one segment) but split a segment that
// is not an ID as a whole into tokens, see split.segment.
func isSeparator(b byte) bool {
	switch b {
	case ':', '/', '|', '#', ';', ',', '=', '@', '.', ' ':
		return true
	}
	return false
}

// tokenKind says how a token is written in a group.
type tokenKind uint8

const (
	// tokWord is a name: written as itself once learnt (or trusted),
	// otherwise "*".
	tokWord tokenKind = iota
	// tokWordNum is a word followed by a number ("order12"): its word
	// (key[start:end]) is learnt and written followed by "*".
	tokWordNum
	// tokID is an identifier (number, UUID, hash, token, hash tag,
	// anything not printable ASCII): always "*".
	tokID
	// tokEmpty is the nothing between two separators ("a::b").
	tokEmpty
)

// token is one position of a key: key[start:end] (for tokWordNum, its
// word), and the separator after it (0: none, the next token follows at
// once, as a hash tag does).
type token struct {
	start, end int
	kind       tokenKind
	sep        byte
}

// split is a key cut into tokens. It lives on the caller's stack.
type split struct {
	toks [maxTokens]token
	n    int
	// more is set when the key has more tokens than maxTokens: the rest
	// is written as one "*".
	more bool
	key  string
}

// add appends a token; it reports false (and sets more) once full.
func (s *split) add(start, end int, kind tokenKind) bool {
	if s.n == maxTokens {
		s.more = true
		return false
	}
	s.toks[s.n] = token{start: start, end: end, kind: kind}
	s.n++
	return true
}

// setSep records the separator after the last token.
func (s *split) setSep(b byte) {
	if s.n > 0 && !s.more {
		s.toks[s.n-1].sep = b
	}
}

// cut splits key into tokens: hash tags and ID-like segments are one ID
// token each; other segments are cut at '-' and '_' into tokens that are
// IDs, words followed by a number, or words.
func (s *split) cut(key string) {
	s.key, s.n, s.more = key, 0, false
	lastClose := strings.LastIndexByte(key, '}')
	for i := 0; i < len(key) && !s.more; {
		if key[i] == '{' && i < lastClose {
			end := i + strings.IndexByte(key[i:], '}') + 1
			s.add(i, end, tokID)
			i = end
		} else {
			j := i
			for j < len(key) && !isSeparator(key[j]) && !(key[j] == '{' && j < lastClose) {
				j++
			}
			s.segment(i, j)
			i = j
		}
		if i < len(key) && key[i] != '{' && isSeparator(key[i]) {
			s.setSep(key[i])
			i++
		}
	}
}

// segment adds the tokens of key[start:end]: one token if it is an ID or a
// word followed by a number as a whole, else one per '-'/'_' part ("user_123"
// is the word "user" and an ID).
func (s *split) segment(start, end int) {
	if start == end {
		s.add(start, end, tokEmpty)
		return
	}
	if s.part(start, end) {
		return
	}
	from := start
	for k := start; k <= end && !s.more; k++ {
		if k < end && s.key[k] != '-' && s.key[k] != '_' {
			continue
		}
		switch {
		case from == k:
			s.add(from, k, tokEmpty)
		case !s.part(from, k):
			s.add(from, k, tokWord)
		}
		if k < end {
			s.setSep(s.key[k])
		}
		from = k + 1
	}
}

// part adds key[start:end] as one token if it is an ID or a word followed
// by a number, and reports whether it did. A number after a word is an ID
// whatever its digits ("nt9" and "nt10" are both "nt*"), except a single
// letter and digit, which names a version or a shard ("v2").
func (s *split) part(start, end int) bool {
	seg := s.key[start:end]
	switch p := wordNumber(seg); {
	case p > 0 && !hexID(seg):
		s.add(start, start+p, tokWordNum)
	case idLike(seg):
		s.add(start, end, tokID)
	default:
		return false
	}
	return true
}

// groupWriter appends to a fixed buffer and, when it runs out, ends the group
// with "*" so a truncated group still reads as a pattern.
type groupWriter struct {
	dst  []byte
	n    int
	full bool
}

func (w *groupWriter) byte(b byte) {
	if w.full {
		return
	}
	if w.n == len(w.dst)-1 {
		w.dst[w.n] = '*'
		w.n++
		w.full = true
		return
	}
	w.dst[w.n] = b
	w.n++
}

func (w *groupWriter) star() { w.byte('*') }

func (w *groupWriter) str(s string) {
	for i := 0; i < len(s) && !w.full; i++ {
		w.byte(s[i])
	}
}

// wordNumber returns the length of the letters of s when s is letters
// followed by digits, longer than two bytes; 0 otherwise.
func wordNumber(s string) int {
	i := 0
	for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z') {
		i++
	}
	if i == 0 || i == len(s) || len(s) <= 2 {
		return 0
	}
	for j := i; j < len(s); j++ {
		if s[j] < '0' || s[j] > '9' {
			return 0
		}
	}
	return i
}

// hexID reports whether s is hex (with optional dashes) of 8+ digits
// containing a digit: a hash or a UUID, starred whole.
func hexID(s string) bool {
	var digits, hex int
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b >= '0' && b <= '9':
			digits++
		case b >= 'a' && b <= 'f', b >= 'A' && b <= 'F':
			hex++
		case b != '-':
			return false
		}
	}
	return digits > 0 && digits+hex >= 8
}

// idLike reports whether s looks like an identifier rather than a name:
// all digits; hex (with optional dashes, so UUIDs) of 8+ digits containing a
// digit; a long token mixing letters and digits (base64, ULIDs); mostly
// digits ("u12345", "2024-01-01"); or anything not printable ASCII, which
// could not safely be a label value.
func idLike(s string) bool {
	var digits, hexLetters, letters, dashes, punct int
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case b >= '0' && b <= '9':
			digits++
		case b >= 'a' && b <= 'f', b >= 'A' && b <= 'F':
			hexLetters++
			letters++
		case b >= 'g' && b <= 'z', b >= 'G' && b <= 'Z':
			letters++
		case b == '-':
			dashes++
		case b == '_' || b == '+' || b == '=':
		case b < 0x21 || b > 0x7e:
			return true
		default:
			punct++
		}
	}
	n := len(s)
	switch {
	case digits == n:
		return true
	case digits > 0 && digits+hexLetters+dashes == n && digits+hexLetters >= 8:
		return true
	case n >= 16 && punct == 0 && digits > 0 && letters > 0:
		return true
	case n >= 3 && 2*digits >= n:
		return true
	}
	return false
}
