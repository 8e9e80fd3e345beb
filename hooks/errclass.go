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
	errUnavailable
	errMoved
	errAsk
	errOOM
	errBusy
	errNoperm
	errOther
	numErrClasses
	// errNoscript is not an error: go-redis answers a NOSCRIPT by sending
	// the script with EVAL. It is counted as a NOSCRIPT reply, never as a
	// failed command.
	errNoscript = numErrClasses
)

var errClassNames = [numErrClasses + 1]string{"timeout", "connection", "unavailable", "moved", "ask", "oom", "busy", "noperm", "other", "noscript"}

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
		case unavailable(msg):
			return errUnavailable
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

// unavailableReplies are the error codes of a server that answers but
// cannot serve: loading its dataset, a replica whose master is down or that
// refuses writes, a Cluster that is down or resharding. go-redis retries
// them; the hook sees those whose retries ran out.
var unavailableReplies = [...]string{"LOADING ", "MASTERDOWN ", "CLUSTERDOWN ", "TRYAGAIN ", "READONLY "}

func unavailable(msg string) bool {
	for _, code := range unavailableReplies {
		if strings.HasPrefix(msg, code) {
			return true
		}
	}
	return false
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
