package safety

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Verdict is a classifier's answer about a text.
type Verdict string

// Verdicts.
const (
	// Allow serves the request.
	Allow Verdict = "allow"
	// Flag serves the request and records the verdict.
	Flag Verdict = "flag"
	// Block refuses the request (input) or ends its answer (output).
	Block Verdict = "block"
)

// Stage says which text a check is about.
type Stage string

// Stages.
const (
	// StageInput checks the prompt, before any token is produced.
	StageInput Stage = "input"
	// StageOutput checks the answer produced so far.
	StageOutput Stage = "output"
)

// Policy decides the verdict of a check that failed.
type Policy string

// Policies.
const (
	// FailOpen allows a request whose check failed.
	FailOpen Policy = "open"
	// FailClosed blocks a request whose check failed, with category
	// CategoryUnavailable.
	FailClosed Policy = "closed"
)

// CategoryUnavailable is the category of the Block verdict that FailClosed
// gives a failed check.
const CategoryUnavailable = "safety_unavailable"

// Defaults and limits.
const (
	// DefaultTimeout is the time a check waits for the classifier when
	// Config.Timeout is 0.
	DefaultTimeout = 200 * time.Millisecond
	// DefaultMaxTextBytes bounds the text sent when Config.MaxTextBytes
	// is 0.
	DefaultMaxTextBytes = 64 << 10
	// MaxResponseBytes bounds the classifier's response body; a longer
	// one fails the check.
	MaxResponseBytes = 64 << 10
)

// Config configures a Checker. The zero value of each field but URL means
// its default.
type Config struct {
	// URL is the classifier's endpoint: http or https, with a host.
	URL string
	// Timeout bounds one check, from sending the request to reading the
	// verdict. Default DefaultTimeout (200ms).
	Timeout time.Duration
	// Policy is the verdict of a check that failed. Default FailOpen.
	Policy Policy
	// OutputEvery is the number of output tokens between output checks:
	// 0 means no periodic output checks; N > 0 means a check each time
	// the answer passes a multiple of N tokens, and one at its end.
	OutputEvery int
	// OutputAtEnd asks for one output check at the end of each answer.
	// OutputEvery > 0 implies it.
	OutputAtEnd bool
	// MaxTextBytes bounds the text sent in one check, in bytes: the first
	// MaxTextBytes of the input, the last MaxTextBytes of the output.
	// Default DefaultMaxTextBytes (64 KiB).
	MaxTextBytes int
}

// DefaultConfig returns the defaults: no URL (it must be set), a 200ms
// timeout, fail-open, no output checks, 64 KiB of text per check.
func DefaultConfig() Config {
	return Config{
		Timeout:      DefaultTimeout,
		Policy:       FailOpen,
		MaxTextBytes: DefaultMaxTextBytes,
	}
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Policy == "" {
		c.Policy = FailOpen
	}
	if c.MaxTextBytes == 0 {
		c.MaxTextBytes = DefaultMaxTextBytes
	}
	return c
}

// Validate reports every problem with c once its defaults are applied: the
// URL must be http or https with a host, the policy known, the timeout
// positive, OutputEvery and MaxTextBytes not negative.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("safety: classifier url is empty"))
	} else if u, err := url.Parse(c.URL); err != nil {
		errs = append(errs, fmt.Errorf("safety: classifier url: %w", err))
	} else {
		if u.Scheme != "http" && u.Scheme != "https" {
			errs = append(errs, fmt.Errorf("safety: classifier url %q: scheme must be http or https", u.Redacted()))
		}
		if u.Host == "" {
			errs = append(errs, fmt.Errorf("safety: classifier url %q has no host", u.Redacted()))
		}
	}
	if c.Policy != FailOpen && c.Policy != FailClosed {
		errs = append(errs, fmt.Errorf("safety: policy %q: it must be %q or %q", c.Policy, FailOpen, FailClosed))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("safety: timeout is %v; it must be positive", c.Timeout))
	}
	if c.OutputEvery < 0 {
		errs = append(errs, fmt.Errorf("safety: output check interval is %d tokens; it must not be negative", c.OutputEvery))
	}
	if c.MaxTextBytes < 0 {
		errs = append(errs, fmt.Errorf("safety: max text bytes is %d; it must not be negative", c.MaxTextBytes))
	}
	return errors.Join(errs...)
}
