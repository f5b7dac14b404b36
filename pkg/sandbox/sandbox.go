// Package sandbox confines the framework plugins, programs that the controller runs and
// that read what its users' workers print, so that a plugin holds none of the controller's
// powers: with Landlock (a Linux security module any process may use on itself, kernel
// 5.13 and later), a plugin process may read and execute its own binary and create its
// sockets in a directory of its own, and nothing else. It cannot read the controller's
// ServiceAccount token or kubeconfig (no file outside those), connect to anything over TCP
// (the API server), nor signal or trace the controller (Landlock's scoping).
//
// The controller starts each plugin through itself (Command): the launcher binary confines
// itself (Exec), then replaces itself with the plugin, which inherits the confinement and
// can never leave it. On a kernel without Landlock the plugin runs unconfined, and
// Supported says so for the controller's log.
package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/hashicorp/go-plugin"
	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// Subcommand is the launcher's hidden command that starts a plugin confined:
// `launcher plugin-sandbox -- PLUGIN`.
const Subcommand = "plugin-sandbox"

// libraryDirs are where the dynamic loader finds shared libraries.
var libraryDirs = []string{"/lib", "/lib64", "/usr/lib", "/usr/lib64"}

// Command returns how the controller starts the plugin at path: through launcher (the
// controller's own binary), confined.
func Command(launcher string) func(path string) *exec.Cmd {
	return func(path string) *exec.Cmd {
		return exec.Command(launcher, Subcommand, "--", path)
	}
}

// Supported is the Landlock ABI version of the running kernel, 0 and why when it has none
// (too old, or Landlock not enabled at boot): plugins then run unconfined.
func Supported() (int, error) {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return 0, fmt.Errorf("the kernel offers no Landlock: %w", err)
	}
	return v, nil
}

// Exec confines the calling process to what a plugin needs (Restrict), with go-plugin's
// socket directory (plugin.EnvUnixSocketDir, which the host sets) the one it may write, and
// replaces it with the program at path, given args and the environment. It returns only on
// failure.
func Exec(path string, args []string) error {
	dir := os.Getenv(plugin.EnvUnixSocketDir)
	if dir == "" {
		return fmt.Errorf("%s is not set: a confined plugin may write nowhere else, so it could not make its socket", plugin.EnvUnixSocketDir)
	}
	if err := Restrict(path, dir); err != nil {
		return err
	}
	return fmt.Errorf("start plugin %s: %w", path, syscall.Exec(path, args, os.Environ()))
}

// Restrict confines the calling process, and every process it starts after, for good: it
// may read and execute program and the system's shared libraries (a plugin built with cgo
// needs the dynamic loader and libc; they hold nothing of anyone's), and read, write and
// make sockets and files in dir; every other file, every TCP bind and connect, and every
// signal and abstract socket to a process outside the confinement are refused. Best effort:
// the kernel's Landlock version decides how much of it holds (none on a kernel without
// Landlock).
func Restrict(program, dir string) error {
	err := landlock.V7.BestEffort().Restrict(
		landlock.ROFiles(program),
		landlock.RODirs(libraryDirs...).IgnoreIfMissing(),
		landlock.ROFiles("/etc/ld.so.cache").IgnoreIfMissing(),
		landlock.RWDirs(dir),
	)
	if err != nil {
		return fmt.Errorf("confine the plugin %s: %w", program, err)
	}
	return nil
}
