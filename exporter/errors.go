package exporter

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Stages of a sample; each is the "stage" label of sample_errors_total.
const (
	stageConnect = "connect"
	stageInfo    = "info"
	stageScan    = "scan"
	stageKeys    = "keys"
	stageLocks   = "locks"
	stageQueues  = "queues"
)

// Error classes; each is the "class" label of sample_errors_total.
const (
	classNoPerm     = "noperm"
	classAuth       = "auth"
	classTimeout    = "timeout"
	classConnection = "connection"
	classMalformed  = "malformed"
	classOther      = "other"
)

// StageError is one failed stage of a node's sample.
type StageError struct {
	Stage string // connect, info, scan, keys, locks, queues
	Class string // noperm, auth, timeout, connection, malformed, other
	Err   error
}

// Error names the stage and class, then the cause.
func (e *StageError) Error() string {
	return "exporter: " + e.Stage + " (" + e.Class + "): " + e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *StageError) Unwrap() error { return e.Err }

// fatal reports whether the node itself is unusable (it cannot be reached or
// refuses us), as opposed to one command being refused or misread.
func (e *StageError) fatal() bool {
	return e.Class == classAuth || e.Class == classTimeout || e.Class == classConnection
}

func stageErr(stage string, err error) *StageError {
	return &StageError{Stage: stage, Class: classify(err), Err: err}
}

// classify maps an error to its class. go-redis returns server errors as
// redis.Error values whose text starts with the error code.
func classify(err error) string {
	var rerr redis.Error
	switch {
	case errors.Is(err, ErrMalformed):
		return classMalformed
	case errors.As(err, &rerr):
		msg := rerr.Error()
		switch {
		case strings.HasPrefix(msg, "NOPERM"):
			return classNoPerm
		case strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "ERR AUTH"),
			strings.Contains(msg, "invalid password"), strings.Contains(msg, "invalid username-password"):
			return classAuth
		case strings.HasPrefix(msg, "LOADING"), strings.HasPrefix(msg, "BUSY"), strings.HasPrefix(msg, "MASTERDOWN"):
			return classConnection
		}
		return classOther
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), isTimeout(err):
		return classTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, redis.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return classConnection
	}
	var nerr net.Error
	var operr *net.OpError
	if errors.As(err, &nerr) || errors.As(err, &operr) {
		return classConnection
	}
	return classOther
}

func isTimeout(err error) bool {
	var nerr net.Error
	return errors.As(err, &nerr) && nerr.Timeout()
}

// isMoved reports a Cluster redirection: the key lives on another master.
func isMoved(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && (strings.HasPrefix(rerr.Error(), "MOVED ") || strings.HasPrefix(rerr.Error(), "ASK "))
}
