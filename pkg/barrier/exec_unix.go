//go:build unix

package barrier

import (
	"os"
	"syscall"
)

// Exec replaces the barrier's process with the worker's command (argv[0] looked up in
// PATH, as the runtime looks up a container's command), in the same container, with the
// same environment, descriptors and PID: once the barrier opened, the worker is the
// container's program, with nothing for the kubelet to do between the two. It returns
// only when the program cannot be run (*ExecError).
func Exec(argv []string) error {
	path, err := lookPath(argv[0])
	if err != nil {
		return err
	}
	return &ExecError{Command: argv[0], Err: syscall.Exec(path, argv, os.Environ())}
}
