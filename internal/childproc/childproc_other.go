//go:build !linux

package childproc

import "os/exec"

func start(cmd *exec.Cmd) error { return cmd.Start() }
