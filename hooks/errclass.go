package hooks

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// errClass is the bounded error_class label of CommandErrors.
type errClass uint8

const (
	errTimeout errClass = iota
	errConnection
	errMoved
	errAsk
	errNoscript
	errOOM
	errBusy
	errNoperm
	errOther
	numErrClasses
)

var errClassNames = [numErrClasses]string{"timeout", "connection", "moved", "ask", "noscript", "oom", "busy", "noperm", "other"}

func (c errClass) String() string { return errClassNames[c] }

// classifyErr maps a command error to its class. err must be non-nil and not
// redis.Nil. Error replies are classified by their prefix (the reply's first
// word is its error code); transport errors by type.
func classifyErr(err error) errClass {
	var rerr redis.Error
	if errors.As(err, &rerr) && !isTransport(err) {
		msg := rerr.Error()
		switch {
		case strings.HasPrefix(msg, "MOVED "):
			return errMoved
		case strings.HasPrefix(msg, "ASK "):
			return errAsk
		case strings.HasPrefix(msg, "NOSCRIPT"):
			return errNoscript
		case strings.HasPrefix(msg, "OOM"):
			return errOOM
		case strings.HasPrefix(msg, "BUSY "):
			return errBusy
		case strings.HasPrefix(msg, "NOPERM"):
			return errNoperm
		}
		return errOther
	}
	if isTimeout(err) {
		return errTimeout
	}
	if isTransport(err) {
		return errConnection
	}
	return errOther
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isTransport reports errors of the connection rather than the command.
func isTransport(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, redis.ErrClosed) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}
