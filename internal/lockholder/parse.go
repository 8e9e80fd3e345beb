package lockholder

import (
	"strconv"
	"strings"
	"time"
)

// Parse reads a lock value. It never fails: a value it cannot read (of
// another format, malformed, or longer than MaxLen) is Opaque, and an
// Opaque Holder carries nothing of the value.
func Parse(value string) Holder {
	if len(value) > MaxLen {
		return Holder{}
	}
	var h Holder
	if strings.HasPrefix(value, "!") {
		h.HoldOff, value = true, value[1:]
	}
	if strings.HasPrefix(value, Version+"|") {
		if rest, wake, ok := strings.Cut(value, "@"); ok {
			value, h.Wake, h.Live = rest, wake, wake == "" && !h.HoldOff
		}
		if !parseCachewatch(value, &h) {
			return Holder{}
		}
		return h
	}
	if h.HoldOff {
		return Holder{}
	}
	return parseRedislock(value)
}

// parseCachewatch reads the fields of "cw1|token|service|host|pid|instance|acquired".
func parseCachewatch(value string, h *Holder) bool {
	var f [7]string
	rest := value
	for i := range f {
		var ok bool
		f[i], rest, ok = strings.Cut(rest, "|")
		if ok != (i < len(f)-1) {
			return false
		}
	}
	var ok [3]bool
	h.Token, ok[0] = unescape(f[1], maxToken)
	h.Service, ok[1] = unescape(f[2], maxField)
	h.Host, ok[2] = unescape(f[3], maxField)
	if !ok[0] || !ok[1] || !ok[2] || h.Token == "" {
		return false
	}
	pid, err := strconv.ParseUint(f[4], 10, 31)
	if err != nil || !isDigits(f[4]) {
		return false
	}
	ms, err := strconv.ParseUint(f[6], 10, 47) // to the year 6429
	if err != nil || !isDigits(f[6]) || !isBase64URL(f[5]) || len(f[5]) > 32 {
		return false
	}
	h.Kind, h.PID, h.Instance, h.Acquired = Cachewatch, int(pid), f[5], time.UnixMilli(int64(ms))
	return true
}

// redislockTokenLen is the length of bsm/redislock's token: 16 random
// bytes, base64url without padding.
const redislockTokenLen = 22

// parseRedislock reads bsm/redislock's value: its token, then the metadata
// its caller gave. A bare token (no metadata) is opaque: any library's
// random token looks the same. So is redsync's (16 bytes, padded standard
// base64: the 22 characters are followed by "==").
func parseRedislock(value string) Holder {
	if len(value) <= redislockTokenLen || !isBase64URL(value[:redislockTokenLen]) {
		return Holder{}
	}
	meta := value[redislockTokenLen:]
	if meta == "==" {
		return Holder{}
	}
	return Holder{Kind: Redislock, Token: value[:redislockTokenLen], Metadata: meta}
}

// unescape undoes appendEscaped, refusing what Encode would not write.
func unescape(s string, limit int) (string, bool) {
	if !strings.ContainsRune(s, '%') {
		for i := 0; i < len(s); i++ {
			if needsEscape(s[i]) {
				return "", false
			}
		}
		return s, len(s) <= limit
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%':
			if i+2 >= len(s) {
				return "", false
			}
			hi, lo := unhex(s[i+1]), unhex(s[i+2])
			if hi < 0 || lo < 0 {
				return "", false
			}
			b = append(b, byte(hi<<4|lo))
			i += 2
		case needsEscape(c):
			return "", false
		default:
			b = append(b, c)
		}
	}
	return string(b), len(b) <= limit
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	}
	return -1
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func isBase64URL(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
