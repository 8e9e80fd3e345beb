// Package childproc starts the programs tests own (redis-server,
// Prometheus, Alertmanager, the cachewatch binary, chromium) so that they
// die with the test process, even when it is killed outright: a test
// binary ended by SIGKILL (go test's -timeout, a CI job cancelled,
// timeout(1)) runs no Cleanup, and its children would otherwise live on,
// holding ports and CPU on a shared machine.
package childproc

import "os/exec"

// Start starts cmd, like cmd.Start, and on Linux asks the kernel to kill
// it (SIGKILL) when this process dies. Elsewhere it is cmd.Start.
func Start(cmd *exec.Cmd) error { return start(cmd) }
