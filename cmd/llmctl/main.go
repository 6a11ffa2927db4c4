// Command llmctl is the command-line client of llmd: it lists the models a
// running llmd serves and chats with them, one-shot (a prompt in the
// arguments or on stdin, the answer streamed to stdout) or interactively.
//
// llmctl talks to llmd only through package api. The daemon's address comes
// from --addr, else the LLMD_ADDR environment variable, else
// http://127.0.0.1:8700.
//
// Exit status: 0 on success, 1 when llmd cannot be reached or reports an
// error, 2 on a usage error, 130 when interrupted.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	// First of the imports' initialisation: keeps bubbletea's init from
	// waiting on a terminal that does not answer.
	"github.com/llmd/llmd/internal/termquiet"
)

// Exit statuses.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// exitError carries a process exit status from a command handler to main.
type exitError struct {
	code int
	// err is printed to stderr as "llmctl: <err>"; nil when there is nothing
	// (more) to say.
	err error
	// hint, when set, is printed on the line after err.
	hint string
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func main() {
	termquiet.Restore()
	os.Exit(run())
}

// run executes llmctl with the process's arguments and standard streams and
// returns its exit status.
func run() int {
	return execute(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
}

// execute runs the command tree on args and returns the exit status, having
// printed any error to stderr as one "llmctl: ..." line.
func execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return exitStatus(root.ExecuteContext(ctx), stderr)
}

// exitStatus reports err on w and returns the exit status it carries.
func exitStatus(err error, w io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		ee = &exitError{code: exitFailure, err: err}
	}
	if ee.err != nil {
		fmt.Fprintf(w, "llmctl: %v\n", ee.err)
	}
	if ee.hint != "" {
		fmt.Fprintln(w, ee.hint)
	}
	return ee.code
}
