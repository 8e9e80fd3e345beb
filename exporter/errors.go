package exporter

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Stage is a step of a node's sample; it is the "stage" label of
// cachewatch_exporter_sample_errors_total.
type Stage string

// Stages of a sample.
const (
	StageConnect Stage = "connect" // PING: the node is reachable and accepts the credentials
	StageInfo    Stage = "info"    // INFO
	StageScan    Stage = "scan"    // SCAN of the whole-keyspace pass
	StageKeys    Stage = "keys"    // per-key TTL reads of the whole-keyspace pass
	StageLocks   Stage = "locks"   // the lock pass: SCAN … MATCH, lock TTLs and owner tokens
	StageQueues  Stage = "queues"  // the configured queue keys
	// StageNotifications follows lock keys through keyspace notifications
	// (CONFIG GET/SET notify-keyspace-events, the subscription).
	StageNotifications Stage = "notifications"
)

// Class says why a stage failed; it is the "class" label of
// cachewatch_exporter_sample_errors_total.
type Class string

// Error classes.
const (
	ClassNoPerm      Class = "noperm"      // refused by ACL
	ClassAuth        Class = "auth"        // wrong user or password
	ClassTimeout     Class = "timeout"     // no answer in time
	ClassConnection  Class = "connection"  // refused, reset, closed, TLS failure, LOADING/BUSY/MASTERDOWN
	ClassClusterDown Class = "clusterdown" // CLUSTERDOWN: the node answers, the Cluster refuses key commands
	ClassMalformed   Class = "malformed"   // a reply that is not Redis's, that could not be parsed, or too large: the node is down
	ClassOther       Class = "other"
)

// StageError is one failed stage of a node's sample.
type StageError struct {
	Stage Stage
	Class Class
	Err   error
}

// Error names the stage and class, then the cause.
func (e *StageError) Error() string {
	return "exporter: " + string(e.Stage) + " (" + string(e.Class) + "): " + e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *StageError) Unwrap() error { return e.Err }

// fatal reports whether the node itself is unusable (it cannot be reached,
// refuses us, or answers what is not a Redis reply), as opposed to one
// command being refused: nothing a node that sends garbage says is trusted.
func (e *StageError) fatal() bool {
	return e.Class == ClassAuth || e.Class == ClassTimeout || e.Class == ClassConnection || e.Class == ClassMalformed
}

func stageErr(stage Stage, err error) *StageError {
	return &StageError{Stage: stage, Class: classify(err), Err: err}
}

// classify maps an error to its class. go-redis returns server errors as
// redis.Error values whose text starts with the error code.
func classify(err error) Class {
	var rerr redis.Error
	switch {
	case errors.Is(err, ErrMalformed), errors.Is(err, ErrBadReply), isProtocolError(err):
		return ClassMalformed
	case errors.Is(err, ErrTLSMismatch):
		return ClassConnection
	case errors.As(err, &rerr):
		return classifyReply(rerr.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), isTimeout(err):
		return ClassTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, redis.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return ClassConnection
	}
	var nerr net.Error
	var operr *net.OpError
	var recErr tls.RecordHeaderError
	if errors.As(err, &nerr) || errors.As(err, &operr) || errors.As(err, &recErr) {
		return ClassConnection
	}
	return ClassOther
}

// classifyReply classes a Redis error reply by its code.
func classifyReply(msg string) Class {
	switch {
	case strings.HasPrefix(msg, "NOPERM"):
		return ClassNoPerm
	case strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "ERR AUTH"),
		strings.Contains(msg, "invalid password"), strings.Contains(msg, "invalid username-password"):
		return ClassAuth
	case strings.HasPrefix(msg, "CLUSTERDOWN"):
		return ClassClusterDown
	case strings.HasPrefix(msg, "LOADING"), strings.HasPrefix(msg, "BUSY"), strings.HasPrefix(msg, "MASTERDOWN"):
		return ClassConnection
	}
	return ClassOther
}

// isProtocolError reports an error of go-redis reading a reply it could
// not parse or whose shape is not what the command returns ("redis: can't
// parse …", "redis: got 3 elements …"): the server answered garbage.
func isProtocolError(err error) bool {
	var rerr redis.Error
	if err == nil || errors.As(err, &rerr) {
		return false
	}
	var num *strconv.NumError
	if errors.As(err, &num) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"redis: can't parse", "redis: invalid reply", "redis: got ", "redis: unexpected",
		"redis: invalid map key", "redis: RESP3", "redis: can't read raw reply"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
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

// refusedCommand returns the command a NOPERM reply names ("… to run the
// 'scan' command"), or "" when it names none (a refused key or channel).
func refusedCommand(err error) string {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return ""
	}
	msg := rerr.Error()
	i := strings.Index(msg, "run the '")
	if i < 0 {
		return ""
	}
	rest := msg[i+len("run the '"):]
	cmd, _, ok := strings.Cut(rest, "'")
	if !ok {
		return ""
	}
	return cmd
}
