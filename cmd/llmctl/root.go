package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/llmd/llmd/api"
)

// defaultAddr is where llmd listens by default.
const defaultAddr = "http://127.0.0.1:8700"

// app holds the state shared by llmctl's commands: the persistent flags and
// the client built from them before a command runs.
type app struct {
	addr string // --addr as given
	base string // addr normalized to a URL
	// apiKey is --api-key, else $LLMD_API_KEY; "" means none. It must never
	// be printed, in help or in errors.
	apiKey string
	// keySource says where apiKey came from: keyFromFlag, keyFromEnv,
	// keyFromSaved, or "" for no key.
	keySource string
	// caCert is --ca-cert, else $LLMD_CA_CERT: the CA llmd's TLS
	// certificate is checked against (else the system's roots).
	caCert string
	client *api.Client
}

// newRootCmd builds llmctl's command tree.
func newRootCmd() *cobra.Command {
	a := &app{}
	root := &cobra.Command{
		Use:   "llmctl",
		Short: "Command-line client of llmd",
		Long: "llmctl talks to a running llmd: it lists the models llmd serves and chats with them,\n" +
			"and manages its API keys, tenants and quotas.\n\n" +
			"The address of llmd is --addr, else $LLMD_ADDR, else " + defaultAddr + ".\n" +
			"The API key is --api-key, else $LLMD_API_KEY, else the key saved for that address by\n" +
			"\"llmctl login\" (or by \"llmctl keys create --admin\"; see \"llmctl config\").\n\n" +
			"Commands that say \"needs an admin key\" need one once llmd has API keys; until the\n" +
			"first key is made, llmctl on llmd's host runs them without a key.",
		Args: usageArgs(unknownCommand),
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return a.connect(cmd)
		},
		SilenceErrors:              true,
		SilenceUsage:               true,
		SuggestionsMinimumDistance: 2,
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError(cmd, err)
	})
	addr := defaultAddr
	if v, ok := os.LookupEnv("LLMD_ADDR"); ok && v != "" {
		addr = v
	}
	root.PersistentFlags().StringVar(&a.addr, "addr", addr,
		"address of llmd, a URL or host:port (env LLMD_ADDR)")
	// No default here: pflag would print $LLMD_API_KEY in --help. connect
	// reads the environment when the flag is not given.
	root.PersistentFlags().StringVar(&a.apiKey, "api-key", "",
		"API key for llmd (env LLMD_API_KEY; prefer it: a flag shows in the process list)")
	root.PersistentFlags().StringVar(&a.caCert, "ca-cert", os.Getenv("LLMD_CA_CERT"),
		"CA certificate (PEM) that an https:// llmd's certificate is checked against (env LLMD_CA_CERT)")

	root.AddCommand(newModelsCmd(a), newNodesCmd(a), newChatCmd(a), newStatsCmd(a), newModelCmd(a),
		newKeysCmd(a), newQuotaCmd(a), newTenantsCmd(a), newUsageCmd(a), newTopCmd(a), newBenchCmd(a),
		newSimulateCmd(), newPlanCmd(a), newLoginCmd(a), newLogoutCmd(a), newConfigCmd(a))
	return root
}

// connect builds the client from --addr and --api-key (else
// $LLMD_API_KEY). An --api-key given as "" sends no key even when the
// environment has one.
func (a *app) connect(cmd *cobra.Command) error {
	base, err := normalizeAddr(a.addr)
	if err != nil {
		return usageError(cmd, err)
	}
	hc, err := httpClient(a.caCert)
	if err != nil {
		return &exitError{code: exitFailure, err: err}
	}
	c, err := api.NewClient(base, hc)
	if err != nil {
		return usageError(cmd, err)
	}
	// The key: --api-key, else $LLMD_API_KEY, else the one saved for
	// this address (llmctl login). A key read from a file with $(cat ...)
	// or pasted may carry spaces or a newline, which no key has and no HTTP
	// header may hold.
	a.keySource = keyFromFlag
	if !cmd.Flags().Changed("api-key") {
		a.apiKey, a.keySource = strings.TrimSpace(os.Getenv("LLMD_API_KEY")), keyFromEnv
		if a.apiKey == "" {
			a.keySource = ""
			if e, ok := savedKey(base, cmd.ErrOrStderr()); ok {
				a.apiKey, a.keySource = e.APIKey, keyFromSaved
			}
		}
	}
	a.apiKey = strings.TrimSpace(a.apiKey)
	if a.apiKey == "" {
		a.keySource = ""
	}
	c.SetAPIKey(a.apiKey)
	a.base, a.client = base, c
	return nil
}

// deprecatedFlag warns on stderr when cmd was given the old flag name,
// which still works.
func deprecatedFlag(cmd *cobra.Command, old, name string) {
	if cmd.Flags().Changed(old) {
		fmt.Fprintf(cmd.ErrOrStderr(), "llmctl: warning: --%s is deprecated, use --%s (the name llmd uses)\n", old, name)
	}
}

// standalone marks cmd as one that never talks to llmd (simulate, plan):
// it skips connecting, and its help leaves out the flags about llmd
// (--addr, --api-key, --ca-cert), which it does not use.
func standalone(cmd *cobra.Command) *cobra.Command {
	cmd.PersistentPreRunE = func(*cobra.Command, []string) error { return nil }
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		// Hiding the root's flags here is safe: help ends the process's
		// only command run.
		c.InheritedFlags().VisitAll(func(f *pflag.Flag) { f.Hidden = true })
		c.Root().HelpFunc()(c, args)
	})
	return cmd
}

// httpClient is the client of llmd: nil (the default) without a CA, else
// one that checks llmd's certificate against the CA in the PEM file.
func httpClient(caFile string) (*http.Client, error) {
	if caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read the CA certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr}, nil
}

// normalizeAddr turns --addr into a base URL: a bare "host:port" gets
// "http://", an empty host becomes 127.0.0.1, a trailing slash is dropped.
func normalizeAddr(addr string) (string, error) {
	s := strings.TrimSpace(addr)
	if s == "" {
		return "", errors.New("--addr is empty")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("invalid --addr %q", addr)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("invalid --addr %q: scheme must be http or https", addr)
	}
	if u.Host == "" {
		return "", fmt.Errorf("invalid --addr %q: no host", addr)
	}
	if u.Hostname() == "" {
		u.Host = net.JoinHostPort("127.0.0.1", u.Port())
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// apiError turns an error from the api client into the exitError llmctl
// reports: one line that says what happened and what to do.
func (a *app) apiError(err error) error {
	var (
		se  *api.StatusError
		ste *api.StreamError
		oe  *net.OpError
	)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return &exitError{code: exitInterrupted}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &exitError{code: exitFailure, err: fmt.Errorf(
			"cannot reach llmd at %s: start it with \"make run\" or \"llmd\", or pass --addr", a.base)}
	case errors.As(err, &oe) && oe.Op == "dial":
		return &exitError{code: exitFailure, err: fmt.Errorf("cannot reach llmd at %s: %v", a.base, oe.Err)}
	case errors.As(err, &se) && se.StatusCode == http.StatusUnauthorized:
		switch a.keySource {
		case "":
			return &exitError{code: exitFailure, err: fmt.Errorf(
				"llmd at %s needs an API key: save one with \"llmctl login\" (or pass --api-key, set LLMD_API_KEY)", a.base)}
		case keyFromSaved:
			return &exitError{code: exitFailure, err: fmt.Errorf(
				"llmd refused the key llmctl saved for %s (%s): %s; save a valid one with \"llmctl login\"",
				a.base, describeKey(a.apiKey, a.keySource), se.Message)}
		}
		return &exitError{code: exitFailure, err: fmt.Errorf(
			"llmd refused the API key (from %s): %s; pass a valid one with --api-key or LLMD_API_KEY, or save one with \"llmctl login\"",
			a.keySource, se.Message)}
	case errors.As(err, &se):
		return &exitError{code: exitFailure, err: errors.New(se.Message)}
	case errors.As(err, &ste):
		return &exitError{code: exitFailure, err: errors.New(ste.Message)}
	default:
		return &exitError{code: exitFailure, err: err}
	}
}

// adminError is apiError for the /v1/admin routes, where a 403 means that
// the key is valid but not an admin key.
func (a *app) adminError(err error) error {
	var se *api.StatusError
	if errors.As(err, &se) && se.StatusCode == http.StatusForbidden {
		return &exitError{code: exitFailure, err: fmt.Errorf(
			"this command needs an admin API key; the key in use (%s) is not one: "+
				"run \"llmctl login\" with an admin key, or pass one with --api-key or LLMD_API_KEY", describeKey(a.apiKey, a.keySource))}
	}
	return a.apiError(err)
}

// isNotFound tells whether llmd answered 404.
func isNotFound(err error) bool {
	var se *api.StatusError
	return errors.As(err, &se) && se.StatusCode == http.StatusNotFound
}

// writeJSON writes v to w as indented JSON, for --json.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// formatTime writes a time the same way in every table: RFC 3339 in UTC,
// to the second.
func formatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339)
}

// usageError marks err as a usage error (exit status 2) of cmd.
func usageError(cmd *cobra.Command, err error) error {
	return &exitError{code: exitUsage, err: err, hint: fmt.Sprintf("Run '%s --help' for usage.", cmd.CommandPath())}
}

// usageArgs makes the errors of an argument validator usage errors.
func usageArgs(fn cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := fn(cmd, args); err != nil {
			return usageError(cmd, err)
		}
		return nil
	}
}

// unknownCommand rejects arguments to the root command: they name a command
// that does not exist.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return errors.New(msg)
}
