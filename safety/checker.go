package safety

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
	"unicode/utf8"
)

var (
	// ErrTimeout fails a check the classifier did not answer within
	// Config.Timeout.
	ErrTimeout = errors.New("safety: classifier did not answer within the timeout")
	// ErrBadResponse fails a check whose answer is unusable: a status
	// other than 200, a body over MaxResponseBytes, a body that does not
	// parse, or a missing or unknown verdict. The wrapping error says
	// which.
	ErrBadResponse = errors.New("safety: bad answer from the classifier")
	// ErrInvalidInput fails a check whose Input has an unknown stage; no
	// request is sent.
	ErrInvalidInput = errors.New("safety: invalid check input")
)

// Request is the body of the POST sent to the classifier (see the package
// doc for the protocol).
type Request struct {
	RequestID string `json:"request_id"`
	Tenant    string `json:"tenant"`
	Model     string `json:"model"`
	Stage     Stage  `json:"stage"`
	Text      string `json:"text"`
	Final     bool   `json:"final"`
	// Truncated is true when Text is a cut of the text (Config.MaxTextBytes).
	Truncated bool `json:"truncated,omitempty"`
}

// Response is the body of the classifier's answer.
type Response struct {
	Verdict  Verdict `json:"verdict"`
	Category string  `json:"category,omitempty"`
	Reason   string  `json:"reason,omitempty"`
}

// Input is what one check is about.
type Input struct {
	RequestID, Tenant, Model string
	// Stage is StageInput or StageOutput.
	Stage Stage
	// Text is, for StageInput, the prompt as the user wrote it (the chat
	// messages' contents joined with "\n", or the completion prompt); for
	// StageOutput, the answer so far. It is cut to Config.MaxTextBytes.
	Text string
	// Final marks the last output check of an answer.
	Final bool
}

// Result is the outcome of one check.
type Result struct {
	// Verdict is the classifier's, or the policy's when Failed.
	Verdict Verdict
	// Category and Reason are the classifier's (empty if it gave none);
	// a fail-closed failure has Category CategoryUnavailable.
	Category, Reason string
	// Latency is the time the check took, or, for a Pending abandoned
	// by Wait, the time since Start.
	Latency time.Duration
	// Failed is true when the classifier gave no usable answer (or the
	// check was abandoned); Verdict is then the policy's.
	Failed bool
	// Err says why the check failed: errors.Is it ErrTimeout,
	// ErrBadResponse, ErrInvalidInput, context.Canceled or
	// context.DeadlineExceeded (the caller's context ended), or a
	// transport error. nil unless Failed.
	Err error
}

// Checker asks the classifier about texts. It is safe for concurrent use. A
// nil *Checker checks nothing: every verdict is Allow, no output check is
// ever due.
type Checker struct {
	cfg    Config
	client *http.Client
	// own is true when New made client, so CloseIdleConnections may close
	// its connections.
	own   bool
	stats stats
}

// New returns a Checker for cfg (defaults applied), or cfg's validation
// error. client sends the checks; nil means a client of the Checker's own,
// with bounded connections, no proxy and no redirects (a 3xx answer fails
// the check). A caller's client is used as it is. The timeout of a check
// comes from cfg; a client's own Timeout, if shorter, also ends checks and
// counts as a timeout.
func New(cfg Config, client *http.Client) (*Checker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Checker{cfg: cfg, client: client}
	if client == nil {
		c.client = newClient(cfg.Timeout)
		c.own = true
	}
	return c, nil
}

// newClient returns the client of a Checker made without one.
func newClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext: (&net.Dialer{
				Timeout:   max(timeout, time.Second),
				KeepAlive: 30 * time.Second,
			}).DialContext,
			ForceAttemptHTTP2: true,
			// Bounded so that a burst of requests cannot open
			// thousands of connections to the classifier: a check
			// waiting for a connection times out like any other.
			MaxConnsPerHost:        256,
			MaxIdleConns:           64,
			MaxIdleConnsPerHost:    64,
			IdleConnTimeout:        90 * time.Second,
			TLSHandshakeTimeout:    5 * time.Second,
			MaxResponseHeaderBytes: 64 << 10,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Config returns the Checker's configuration, defaults applied.
func (c *Checker) Config() Config {
	if c == nil {
		return Config{}
	}
	return c.cfg
}

// CloseIdleConnections closes the idle connections of the client New made
// (none of a client the caller passed). The Checker stays usable: later
// checks open new connections. The daemon calls it when it stops.
func (c *Checker) CloseIdleConnections() {
	if c != nil && c.own {
		c.client.CloseIdleConnections()
	}
}

// outcome is how a check ended, for the stats.
type outcome int

const (
	answered outcome = iota
	failed
	timedOut
	canceled
)

// Check asks the classifier about in and returns its verdict. It blocks
// for at most Config.Timeout, less if ctx ends first. It never fails
// separately: a failure is a Result with Failed set and the policy's
// verdict.
func (c *Checker) Check(ctx context.Context, in Input) Result {
	if c == nil {
		return Result{Verdict: Allow}
	}
	start := time.Now()
	res, out := c.check(ctx, in)
	res.Latency = time.Since(start)
	c.stats.record(res.Verdict, out, res.Latency)
	return res
}

func (c *Checker) check(ctx context.Context, in Input) (Result, outcome) {
	if in.Stage != StageInput && in.Stage != StageOutput {
		return c.failure(fmt.Errorf("%w: unknown stage %q", ErrInvalidInput, in.Stage)), failed
	}
	body, err := c.encode(in)
	if err != nil {
		return c.failure(fmt.Errorf("%w: encode request: %w", ErrInvalidInput, err)), failed
	}
	cctx, cancel := context.WithTimeoutCause(ctx, c.cfg.Timeout, ErrTimeout)
	defer cancel()
	res, err := c.post(cctx, body)
	if err == nil {
		return res, answered
	}
	switch {
	case errors.Is(context.Cause(cctx), ErrTimeout):
		return c.failure(fmt.Errorf("%w (%v)", ErrTimeout, c.cfg.Timeout)), timedOut
	case ctx.Err() != nil:
		return c.failure(fmt.Errorf("safety: check abandoned: %w", context.Cause(ctx))), canceled
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		// The caller's client has a timeout of its own.
		return c.failure(fmt.Errorf("%w: %w", ErrTimeout, err)), timedOut
	}
	return c.failure(err), failed
}

// encode returns the JSON body for in, its text cut to MaxTextBytes.
func (c *Checker) encode(in Input) ([]byte, error) {
	text, cut := in.Text, false
	if len(text) > c.cfg.MaxTextBytes {
		cut = true
		if in.Stage == StageInput {
			text = head(text, c.cfg.MaxTextBytes)
		} else {
			text = tail(text, c.cfg.MaxTextBytes)
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(Request{
		RequestID: in.RequestID,
		Tenant:    in.Tenant,
		Model:     in.Model,
		Stage:     in.Stage,
		Text:      text,
		Final:     in.Final,
		Truncated: cut,
	})
	return buf.Bytes(), err
}

// head returns the longest prefix of s of at most n bytes that does not
// split a UTF-8 sequence.
func head(s string, n int) string {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// tail returns the longest suffix of s of at most n bytes that does not
// split a UTF-8 sequence.
func tail(s string, n int) string {
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// post sends body to the classifier and reads its verdict. Its error is
// nil only for a usable answer.
func (c *Checker) post(ctx context.Context, body []byte) (Result, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return Result{}, fmt.Errorf("safety: build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "llmd-safety")
	resp, err := c.client.Do(req)
	if err != nil {
		return Result{}, fmt.Errorf("safety: ask classifier: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return Result{}, fmt.Errorf("%w: status %d: %q", ErrBadResponse, resp.StatusCode, snippet)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return Result{}, fmt.Errorf("safety: read classifier answer: %w", err)
	}
	if len(data) > MaxResponseBytes {
		return Result{}, fmt.Errorf("%w: body over %d bytes", ErrBadResponse, MaxResponseBytes)
	}
	var r Response
	if err := json.Unmarshal(data, &r); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrBadResponse, err)
	}
	switch r.Verdict {
	case Allow, Flag, Block:
	default:
		return Result{}, fmt.Errorf("%w: unknown verdict %q", ErrBadResponse, r.Verdict)
	}
	return Result{Verdict: r.Verdict, Category: r.Category, Reason: r.Reason}, nil
}

// failure returns the policy's result for a check that failed with err.
func (c *Checker) failure(err error) Result {
	if c.cfg.Policy == FailClosed {
		return Result{
			Verdict:  Block,
			Category: CategoryUnavailable,
			Reason:   "the safety check is unavailable",
			Failed:   true,
			Err:      err,
		}
	}
	return Result{Verdict: Allow, Failed: true, Err: err}
}
