package childproc

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// A child's death signal (PR_SET_PDEATHSIG) is sent when the thread that
// forked it ends, not the process, and the Go runtime may end a thread
// (one whose goroutine exited while locked to it). So every child is
// forked from one goroutine locked to its thread for the life of the
// process: that thread ends only with it.
var (
	spawnOnce sync.Once
	spawns    = make(chan spawn)
)

type spawn struct {
	cmd *exec.Cmd
	err chan error
}

func start(cmd *exec.Cmd) error {
	spawnOnce.Do(func() { go spawner() })
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	s := spawn{cmd: cmd, err: make(chan error, 1)}
	spawns <- s
	return <-s.err
}

// spawner starts the children on its own thread, which it never leaves.
func spawner() {
	runtime.LockOSThread()
	for s := range spawns {
		s.err <- s.cmd.Start()
	}
}
