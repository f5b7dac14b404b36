//go:build !unix

package barrier

import "errors"

// Exec is the barrier's on Unix (exec_unix.go); elsewhere it cannot replace its process.
func Exec(argv []string) error {
	return &ExecError{Command: argv[0], Err: errors.ErrUnsupported}
}
