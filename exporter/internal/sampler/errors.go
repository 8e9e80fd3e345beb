package sampler

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

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
)

// Aliases of the snapshot's error vocabulary, for brevity here.
type (
	// StageError is one failed stage of a node's sample.
	StageError = snapshot.StageError
	// Stage is a step of a node's sample.
	Stage = snapshot.Stage
	// Class says why a stage failed.
	Class = snapshot.Class
)

// Stages and classes, as the snapshot names them.
const (
	StageConnect       = snapshot.StageConnect
	StageInfo          = snapshot.StageInfo
	StageLatency       = snapshot.StageLatency
	StageScan          = snapshot.StageScan
	StageKeys          = snapshot.StageKeys
	StageLocks         = snapshot.StageLocks
	StageQueues        = snapshot.StageQueues
	StageNotifications = snapshot.StageNotifications

	ClassNoPerm      = snapshot.ClassNoPerm
	ClassAuth        = snapshot.ClassAuth
	ClassTimeout     = snapshot.ClassTimeout
	ClassConnection  = snapshot.ClassConnection
	ClassClusterDown = snapshot.ClassClusterDown
	ClassMalformed   = snapshot.ClassMalformed
	ClassOther       = snapshot.ClassOther
)

// ErrMalformed marks a reply the sampler could not parse (INFO, LATENCY
// HISTOGRAM, CLUSTER NODES, CONFIG GET). The stage that read it is counted
// as failed (class "malformed"); nothing half-parsed is exported.
var ErrMalformed = errors.New("exporter: malformed INFO")

// ErrNotSampled is the error of a node that has not been sampled yet: it
// reports up 0 from the start, so that an up == 0 alert can fire before the
// first sample ends.
var ErrNotSampled = errors.New("exporter: not sampled yet")

func stageErr(stage Stage, err error) *StageError {
	return &StageError{Stage: stage, Class: classify(err), Err: err}
}

// answeredLate reports whether se is a timeout: the server answered late,
// it did not change, so the passes keep their progress (a restart shows in
// INFO's run_id, lost keyspace events in a new subscription).
func answeredLate(se *StageError) bool { return se.Class == ClassTimeout }

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
