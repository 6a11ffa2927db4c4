package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmd/llmd/api"
)

// preferredModel is chosen when -m is not given and llmd serves it.
const preferredModel = "sim/small"

// chatOptions are the flags of "llmctl chat".
type chatOptions struct {
	model       string
	maxTokens   int
	temperature float64
	seed        int64
	system      string
	verbose     bool
}

// newChatCmd builds "llmctl chat".
func newChatCmd(a *app) *cobra.Command {
	o := &chatOptions{}
	cmd := &cobra.Command{
		Use:   "chat [PROMPT...]",
		Short: "Chat with a model",
		Long: `Chat with a model served by llmd.

With a prompt in the arguments, or with stdin not a terminal (the whole of
stdin is the prompt), llmctl streams the answer to stdout and exits.

Otherwise it starts an interactive chat that keeps the conversation:
  /clear       forget the conversation
  /bye         quit (or Ctrl-D)
  Ctrl-C       stop the answer being written
When stdout is a terminal too, the chat is full-screen (Esc also quits) and
  /model NAME  switches the model
  /system TEXT sets the system message`,
		Example: `  llmctl chat "Why is the sky blue?"
  echo "Summarize: ..." | llmctl chat -m sim/mid --max-tokens 200
  llmctl chat --system "You are terse."`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.chat(cmd, o, args)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.model, "model", "m", "", `model to chat with (default "`+preferredModel+`" if served, else the first model)`)
	f.IntVar(&o.maxTokens, "max-tokens", 0, "maximum number of tokens to generate (default: the server's)")
	f.Float64Var(&o.temperature, "temperature", 0, "sampling temperature, 0 to 2 (default: the server's)")
	f.Int64Var(&o.seed, "seed", 0, "sampling seed, for repeatable answers")
	f.StringVar(&o.system, "system", "", "system message to start the conversation with")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "print token counts, finish reason and speed to stderr")
	return cmd
}

// chat runs "llmctl chat": one-shot or interactive.
func (a *app) chat(cmd *cobra.Command, o *chatOptions, args []string) error {
	ctx := cmd.Context()
	prompt, interactive, err := readPrompt(cmd, args)
	if err != nil {
		return err
	}
	model, err := a.pickModel(ctx, o.model)
	if err != nil {
		return err
	}
	c := &chatter{
		client:  a.client,
		req:     api.NativeChatRequest{Model: model},
		system:  o.system,
		out:     cmd.OutOrStdout(),
		errOut:  cmd.ErrOrStderr(),
		verbose: o.verbose,
		report:  a.apiError,
	}
	f := cmd.Flags()
	if f.Changed("max-tokens") {
		c.req.MaxTokens = &o.maxTokens
	}
	if f.Changed("temperature") {
		c.req.Temperature = &o.temperature
	}
	if f.Changed("seed") {
		c.req.Seed = &o.seed
	}

	if interactive && isTerminalWriter(cmd.OutOrStdout()) {
		return a.chatTUI(cmd, c)
	}
	if interactive {
		interrupts := make(chan os.Signal, 1)
		signal.Notify(interrupts, os.Interrupt)
		defer signal.Stop(interrupts)
		return c.interactive(ctx, cmd.InOrStdin(), interrupts)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	_, err = c.turn(ctx, c.messages(nil, prompt))
	return a.apiError(err)
}

// readPrompt returns the one-shot prompt (the arguments, else the whole of a
// stdin that is not a terminal), or interactive true.
func readPrompt(cmd *cobra.Command, args []string) (prompt string, interactive bool, err error) {
	if len(args) > 0 {
		prompt = strings.Join(args, " ")
	} else {
		in := cmd.InOrStdin()
		if isTerminal(in) {
			return "", true, nil
		}
		b, err := io.ReadAll(in)
		if err != nil {
			return "", false, fmt.Errorf("read prompt from stdin: %w", err)
		}
		prompt = string(b)
	}
	if strings.TrimSpace(prompt) == "" {
		return "", false, usageError(cmd, errors.New("empty prompt: give it as arguments or on stdin"))
	}
	return prompt, false, nil
}

// isTerminal reports whether r is a terminal (a character device other than
// the null device).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(fi, null) {
		return false
	}
	return true
}

// pickModel returns want, or when it is empty preferredModel if llmd serves
// it, else the first model llmd lists.
func (a *app) pickModel(ctx context.Context, want string) (string, error) {
	if want != "" {
		return want, nil
	}
	models, err := a.client.Models(ctx)
	if err != nil {
		return "", a.apiError(err)
	}
	if len(models) == 0 {
		return "", &exitError{code: exitFailure, err: fmt.Errorf("llmd at %s serves no models", a.base)}
	}
	for _, m := range models {
		if m.ID == preferredModel {
			return m.ID, nil
		}
	}
	return models[0].ID, nil
}

// chatter sends conversations to one model and streams the answers.
type chatter struct {
	client  *api.Client
	req     api.NativeChatRequest // model and sampling options; Messages are set per turn
	system  string
	out     io.Writer // the answers (and, interactively, the prompt)
	errOut  io.Writer // errors and, with verbose, statistics
	verbose bool
	// report turns a client error into the exitError to print.
	report func(error) error
}

// messages returns the conversation to send: the system message, history,
// then prompt as the user's new message.
func (c *chatter) messages(history []api.Message, prompt string) []api.Message {
	msgs := make([]api.Message, 0, len(history)+2)
	if c.system != "" {
		msgs = append(msgs, api.Message{Role: "system", Content: api.Content(c.system)})
	}
	msgs = append(msgs, history...)
	return append(msgs, api.Message{Role: "user", Content: api.Content(prompt)})
}

// turn streams the answer to msgs to c.out as it arrives and returns it.
// The output always ends with a newline once something was written, and on
// success even when the answer is empty.
func (c *chatter) turn(ctx context.Context, msgs []api.Message) (string, error) {
	req := c.req
	req.Messages = msgs
	var (
		answer strings.Builder
		start  = time.Now()
		first  time.Time
	)
	done, err := c.client.Chat(ctx, req, func(d api.NativeDelta) error {
		if d.Delta == "" {
			return nil
		}
		if first.IsZero() {
			first = time.Now()
		}
		answer.WriteString(d.Delta)
		_, err := io.WriteString(c.out, d.Delta)
		return err
	})
	end := time.Now()
	text := answer.String()
	if (err == nil || text != "") && !strings.HasSuffix(text, "\n") {
		if _, werr := io.WriteString(c.out, "\n"); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		return text, err
	}
	if c.verbose {
		fmt.Fprintln(c.errOut, formatStats(done, start, first, end))
	}
	return text, nil
}

// formatStats describes a finished answer in one line.
func formatStats(done *api.NativeDone, start, first, end time.Time) string {
	u := done.Usage
	s := fmt.Sprintf("%s: %d input tokens (%d cached), %d output tokens, finish %s",
		done.Model, u.InputTokens, u.CachedTokens, u.OutputTokens, done.FinishReason)
	if !first.IsZero() {
		s += fmt.Sprintf(", first token %dms", first.Sub(start).Milliseconds())
		if gen := end.Sub(first); u.OutputTokens > 1 && gen > 0 {
			s += fmt.Sprintf(", %.1f tokens/s", float64(u.OutputTokens-1)/gen.Seconds())
		}
	}
	return s
}

const (
	promptText    = ">>> "
	interruptHint = "use /bye or Ctrl-D to quit"
	helpText      = `Commands:
  /clear   forget the conversation
  /bye     quit (or Ctrl-D)
  /?       this help
Ctrl-C stops the answer being written.
`
)

// interactive runs the ">>> " prompt loop on in until "/bye", the end of in
// or the end of ctx. Each turn sends the whole conversation. A value on
// interrupts (Ctrl-C) while an answer streams cancels that request, which
// closes its connection so llmd frees the sequence, and returns to the
// prompt; at the prompt it prints a hint. A failed turn is reported on
// errOut and left out of the conversation.
func (c *chatter) interactive(ctx context.Context, in io.Reader, interrupts <-chan os.Signal) error {
	lines := newLineReader(in)
	defer lines.close()
	fmt.Fprintf(c.out, "Chatting with %s. Type /? for help, /bye or Ctrl-D to quit.\n", c.req.Model)
	var history []api.Message
	for {
		fmt.Fprint(c.out, promptText)
		line, err := c.readLine(ctx, lines, interrupts)
		if errors.Is(err, io.EOF) {
			fmt.Fprintln(c.out)
			return nil
		}
		if err != nil {
			return err
		}
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case line == "/bye":
			return nil
		case line == "/clear":
			history = nil
			fmt.Fprintln(c.out, "Cleared the conversation.")
		case line == "/?" || line == "/help":
			fmt.Fprint(c.out, helpText)
		case strings.HasPrefix(line, "/"):
			fmt.Fprintf(c.out, "Unknown command %s. Type /? for help.\n", strings.Fields(line)[0])
		default:
			msgs := c.messages(history, line)
			answer, err := c.interruptibleTurn(ctx, msgs, interrupts)
			switch {
			case err == nil:
				history = append(history,
					api.Message{Role: "user", Content: api.Content(line)},
					api.Message{Role: "assistant", Content: api.Content(answer)})
				fmt.Fprintln(c.out)
			case errors.Is(err, errInterrupted):
				fmt.Fprintln(c.out, "^C (cancelled)")
			case ctx.Err() != nil:
				return ctx.Err()
			default:
				exitStatus(c.report(err), c.errOut)
			}
		}
	}
}

// errInterrupted is returned by interruptibleTurn when Ctrl-C stopped the
// answer.
var errInterrupted = errors.New("llmctl: answer interrupted")

// readLine waits for the next line of input. Interrupts at the prompt print
// a hint and keep waiting; the terminal has dropped the partial line.
func (c *chatter) readLine(ctx context.Context, lines *lineReader, interrupts <-chan os.Signal) (string, error) {
	ch := lines.next()
	for {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-interrupts:
			fmt.Fprintf(c.out, "\n%s\n%s", interruptHint, promptText)
		case r := <-ch:
			lines.pending = false
			return r.line, r.err
		}
	}
}

// interruptibleTurn runs turn, cancelling it on an interrupt.
func (c *chatter) interruptibleTurn(ctx context.Context, msgs []api.Message, interrupts <-chan os.Signal) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		interrupted bool
		wg          sync.WaitGroup
		finished    = make(chan struct{})
	)
	wg.Go(func() {
		select {
		case <-interrupts:
			interrupted = true
			cancel()
		case <-finished:
		}
	})
	answer, err := c.turn(ctx, msgs)
	close(finished)
	wg.Wait()
	if err != nil && interrupted && errors.Is(err, context.Canceled) {
		return answer, errInterrupted
	}
	return answer, err
}

// lineReader reads lines from an io.Reader in its own goroutine, one line per
// request, so that a caller can wait for a line and for interrupts at once,
// and so that nothing is read ahead of the prompt (typed-ahead input stays in
// the terminal until the next prompt). After a result with an error (io.EOF
// at the end of input) no more lines may be requested. The goroutine ends
// after that error or after close; if close comes while a read is blocked in
// the reader, it ends as soon as that read returns.
type lineReader struct {
	want    chan struct{}
	lines   chan lineResult // buffered, so run never blocks on a sent line
	pending bool            // a line was requested and not yet received
}

type lineResult struct {
	line string
	err  error
}

func newLineReader(r io.Reader) *lineReader {
	lr := &lineReader{want: make(chan struct{}), lines: make(chan lineResult, 1)}
	go lr.run(r)
	return lr
}

func (lr *lineReader) run(r io.Reader) {
	br := bufio.NewReader(r)
	for range lr.want {
		line, err := br.ReadString('\n')
		if err == io.EOF && line != "" {
			err = nil // a last line without a newline
		}
		lr.lines <- lineResult{line: strings.TrimRight(line, "\r\n"), err: err}
		if err != nil {
			return
		}
	}
}

// next requests a line, unless one is already requested, and returns the
// channel it will arrive on. The caller sets pending false on receipt.
func (lr *lineReader) next() <-chan lineResult {
	if !lr.pending {
		lr.want <- struct{}{}
		lr.pending = true
	}
	return lr.lines
}

// close stops the goroutine once it is not blocked in a read.
func (lr *lineReader) close() {
	close(lr.want)
}
