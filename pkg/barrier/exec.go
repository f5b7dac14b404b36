package barrier

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// ExecError is why the worker's command could not be run (Supervise).
type ExecError struct {
	Command string
	Err     error
}

func (e *ExecError) Error() string {
	return fmt.Sprintf("run the worker's command %q: %v", e.Command, e.Err)
}

func (e *ExecError) Unwrap() error { return e.Err }

// lookPath finds the worker's command as the runtime finds a container's: in PATH, a
// relative name in the working directory too; else an *ExecError.
func lookPath(command string) (string, error) {
	path, err := exec.LookPath(command)
	if err != nil && !errors.Is(err, exec.ErrDot) {
		return "", &ExecError{Command: command, Err: err}
	}
	return path, nil
}

// ExitStatus is the shell's for a command it cannot run: 127 when there is no such
// program, 126 when there is one that cannot be executed.
func (e *ExecError) ExitStatus() int {
	if errors.Is(e.Err, exec.ErrNotFound) || errors.Is(e.Err, os.ErrNotExist) {
		return 127
	}
	return 126
}
