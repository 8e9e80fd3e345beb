package childproc_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cachewatch/cachewatch/internal/childproc"
	"github.com/cachewatch/cachewatch/internal/poll"
)

const helperEnv = "CHILDPROC_HELPER"

// TestChildDiesWithItsParent kills (SIGKILL) a process that started a
// child through Start, and expects the child to end too. Without the
// death signal the child sleeps on, and the test fails.
func TestChildDiesWithItsParent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the kernel's parent-death signal is Linux only")
	}
	if os.Getenv(helperEnv) == "1" {
		helper(t)
		return
	}
	parent := exec.Command(os.Args[0], "-test.run=^TestChildDiesWithItsParent$", "-test.count=1")
	parent.Env = append(os.Environ(), helperEnv+"=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = parent.Process.Kill(); _ = parent.Wait() })
	child := readChildPID(t, bufio.NewScanner(out))
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	if !alive(child) {
		t.Fatalf("child %d is not running before its parent is killed", child)
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	// Generous: the kernel signals at once, but a busy machine may run
	// the reaping late.
	poll.Until(t, fmt.Sprintf("child %d to end after its parent was killed", child), func() bool { return !alive(child) })
}

// helper is the parent: it starts a long sleep through Start, prints its
// PID and waits to be killed.
func helper(t *testing.T) {
	cmd := exec.Command("sleep", "300")
	if err := childproc.Start(cmd); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("CHILD %d\n", cmd.Process.Pid)
	time.Sleep(5 * time.Minute) // until killed
}

func readChildPID(t *testing.T, sc *bufio.Scanner) int {
	t.Helper()
	for sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "CHILD "); ok {
			pid, err := strconv.Atoi(s)
			if err != nil || pid <= 0 {
				t.Fatalf("helper could not start its child: %q", sc.Text())
			}
			return pid
		}
	}
	t.Fatalf("helper ended without starting its child: %v", sc.Err())
	return 0
}

// alive reports whether pid runs: it exists and is not a zombie (in a
// container whose first process does not reap, an orphan killed stays a
// zombie).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}
