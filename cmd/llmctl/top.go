package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/spf13/cobra"

	"github.com/llmd/llmd/tui"
)

// topOptions are the flags of "llmctl top".
type topOptions struct {
	interval time.Duration
	readOnly bool
	once     bool
	asJSON   bool
}

// newTopCmd builds "llmctl top".
func newTopCmd(a *app) *cobra.Command {
	o := &topOptions{}
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Watch llmd live: KV cache, queues per tier, tokens/s, latencies, requests, tenants' quotas (needs an admin key)",
		Long: `Watch a running llmd: per model its KV cache (used, cached, free blocks), the
sequences running and waiting per tier, tokens/s over the last minute, TTFT and
ITL percentiles, preemptions, prefix-cache hits and degradation level; its GPUs;
and tables of the live requests, the tenants' quota burn, the models and the
nodes. It needs an admin API key (GET /v1/admin/snapshot).

The nodes view (4) shows this node alone, or, when llmd is clustered, one row
per member as this node sees it: its status (alive, draining, suspect, dead,
left; the worst first), running and waiting sequences, KV MAX (its fullest
model's KV cache use), models, cached-prefix keys and the age of its last
gossiped update, under a line "cluster: N members, M alive".

Keys: 1-4 or Tab switch views, / filters, , and . choose the sort column, r
reverses it, Up/Down select, Enter follows the selected request's tokens (Esc
goes back), K cancels it (after y), p pauses, + and - change the interval by
250ms, ? shows every key, q quits.

--once prints one snapshot as plain text, without colours, and exits: use it
in scripts, or where stdout is not a terminal. Its first line ends in "(not
clustered)" or "(cluster: N members, M alive)"; a clustered node's ends with a
CLUSTER table of the members. It fits 80 columns. --json prints the snapshot
as JSON instead (the shape of GET /v1/admin/snapshot), and implies --once.`,
		Example: `  llmctl top
  llmctl top --interval 500ms --readonly
  llmctl top --once | grep decode
  llmctl top --json | jq '.gpus'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.top(cmd, o)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.interval, "interval", tui.DefaultInterval, "time between snapshots (at least 250ms)")
	f.BoolVar(&o.readOnly, "readonly", false, "never cancel requests (K is disabled)")
	f.BoolVar(&o.once, "once", false, "print one snapshot as plain text and exit")
	f.BoolVar(&o.asJSON, "json", false, "print one snapshot as JSON and exit")
	return cmd
}

// top runs "llmctl top".
func (a *app) top(cmd *cobra.Command, o *topOptions) error {
	if o.interval < tui.MinInterval {
		return usageError(cmd, fmt.Errorf("--interval %s is below the minimum of %s", o.interval, tui.MinInterval))
	}
	out := cmd.OutOrStdout()
	if o.once || o.asJSON {
		s, err := a.client.Snapshot(cmd.Context())
		if err != nil {
			return a.adminError(err)
		}
		if o.asJSON {
			return writeJSON(out, s)
		}
		return tui.WriteSnapshot(out, s)
	}
	if !isTerminalWriter(out) {
		return &exitError{code: exitFailure, err: errors.New(
			"llmctl top needs a terminal on stdout; use --once to print one snapshot as plain text")}
	}
	st := tui.DefaultStyles(newRenderer(out))
	m := tui.NewTop(a.client, tui.TopOptions{
		Interval:  o.interval,
		ReadOnly:  o.readOnly,
		Addr:      a.base,
		ErrorText: errorText(a.adminError),
	}, st, tui.DefaultKeyMap())
	p := tea.NewProgram(m, tea.WithAltScreen(), tea.WithContext(cmd.Context()),
		tea.WithInput(cmd.InOrStdin()), tea.WithOutput(out))
	_, err := p.Run()
	m.Close()
	return programError(cmd, err)
}

// programError maps the error of a Bubble Tea program's Run: killed
// because the command's context ended is an interruption.
func programError(cmd *cobra.Command, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, tea.ErrProgramKilled) && cmd.Context().Err() != nil:
		return &exitError{code: exitInterrupted}
	case errors.Is(err, tea.ErrInterrupted):
		return &exitError{code: exitInterrupted}
	}
	return &exitError{code: exitFailure, err: fmt.Errorf("terminal UI: %w", err)}
}

// errorText returns the function that turns a client error into the one
// line a TUI shows: the message that report (apiError or adminError) gives
// it, without the exit status.
func errorText(report func(error) error) func(error) string {
	return func(err error) string {
		var ee *exitError
		if errors.As(report(err), &ee) && ee.err != nil {
			return ee.err.Error()
		}
		return err.Error()
	}
}

// isTerminalWriter reports whether w is a terminal.
func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}
