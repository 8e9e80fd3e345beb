package keygroup

import "strings"

// isSeparator reports whether b separates the segments of a key. '-' and '_'
// are not separators ("job-result" is one name) but split sub-segments, see
// groupWriter.segment.
func isSeparator(b byte) bool {
	switch b {
	case ':', '/', '|', '#', ';', ',', '=', '@', '.', ' ':
		return true
	}
	return false
}

// derive writes the group of key into dst (len(dst) == MaxGroupLen) and
// returns its length. ID-like segments and hash tags become "*".
func derive(dst []byte, key string) int {
	if key == "" {
		dst[0] = '*'
		return 1
	}
	w := groupWriter{dst: dst}
	lastClose := strings.LastIndexByte(key, '}')
	i := 0
	for i < len(key) && !w.full {
		if key[i] == '{' && i < lastClose {
			// A hash tag: everything up to the next '}' is one ID.
			w.star()
			i += strings.IndexByte(key[i:], '}') + 1
			continue
		}
		j := i
		for j < len(key) && !isSeparator(key[j]) && !(key[j] == '{' && j < lastClose) {
			j++
		}
		w.segment(key[i:j])
		if j < len(key) && key[j] != '{' {
			w.byte(key[j])
			j++
		}
		i = j
	}
	return w.n
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

// segment writes one separator-delimited segment: "*" if it is ID-like as a
// whole, a word followed by a number as the word and "*" ("order12" →
// "order*"), otherwise its '-'/'_' sub-segments, each written the same way
// ("user_123" → "user_*").
func (w *groupWriter) segment(seg string) {
	if seg == "" {
		return
	}
	if w.part(seg) {
		return
	}
	start := 0
	for k := 0; k <= len(seg); k++ {
		if k < len(seg) && seg[k] != '-' && seg[k] != '_' {
			continue
		}
		if sub := seg[start:k]; sub != "" && !w.part(sub) {
			w.str(sub)
		}
		if k < len(seg) {
			w.byte(seg[k])
		}
		start = k + 1
	}
}

// part writes s starred if it is an ID or a word followed by a number, and
// reports whether it did. A number after a word is an ID whatever its
// digits ("nt9" and "nt10" are both "nt*"), except a single letter and
// digit, which names a version or a shard ("v2").
func (w *groupWriter) part(s string) bool {
	if p := wordNumber(s); p > 0 && !hexID(s) {
		w.str(s[:p])
		w.star()
		return true
	}
	if idLike(s) {
		w.star()
		return true
	}
	return false
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
