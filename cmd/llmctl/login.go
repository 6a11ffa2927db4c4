package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/charmbracelet/x/term"
	"github.com/spf13/cobra"

	"github.com/llmd/llmd/internal/clicfg"
)

// Where the API key in use came from (app.keySource).
const (
	keyFromFlag  = "--api-key"
	keyFromEnv   = "LLMD_API_KEY"
	keyFromSaved = "saved"
)

// configDirEnv overrides llmctl's configuration directory (by default
// llmd/ under the user's configuration directory: $XDG_CONFIG_HOME/llmd or
// ~/.config/llmd on Linux).
const configDirEnv = "LLMCTL_CONFIG_DIR"

// credentialsPath is the file of llmctl's saved keys.
func credentialsPath() (string, error) {
	if d := os.Getenv(configDirEnv); d != "" {
		return filepath.Join(d, clicfg.FileName), nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("find the configuration directory: %w; set %s", err, configDirEnv)
	}
	return filepath.Join(dir, "llmd", clicfg.FileName), nil
}

// loadCredentials reads llmctl's saved keys and returns them with their
// file's path.
func loadCredentials() (*clicfg.File, string, error) {
	path, err := credentialsPath()
	if err != nil {
		return nil, "", err
	}
	f, err := clicfg.Load(path)
	return f, path, err
}

// savedKey returns the key saved for base, if any. A file that cannot be
// read is reported on w once and treated as empty: a broken file must not
// stop commands that were given a key another way.
func savedKey(base string, w io.Writer) (clicfg.Entry, bool) {
	f, _, err := loadCredentials()
	if err != nil {
		fmt.Fprintf(w, "llmctl: warning: %v\n", err)
		return clicfg.Entry{}, false
	}
	return f.Get(base)
}

// saveKey saves key as llmctl's key for base and says so on w.
func (a *app) saveKey(w io.Writer, key string, admin bool) error {
	f, path, err := loadCredentials()
	if err != nil {
		return err
	}
	e := clicfg.Entry{APIKey: key, KeyID: keyIDOf(key), Admin: admin, Saved: time.Now().UTC().Truncate(time.Second)}
	if err := f.Set(a.base, e); err != nil {
		return err
	}
	if err := f.Save(path); err != nil {
		return err
	}
	kind := "key"
	if admin {
		kind = "admin key"
	}
	fmt.Fprintf(w, "saved the %s %s as llmctl's key for %s in %s (\"llmctl logout\" forgets it)\n", kind, e, a.base, path)
	return nil
}

// newLoginCmd builds "llmctl login".
func newLoginCmd(a *app) *cobra.Command {
	var noVerify bool
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Save an API key for llmctl to use with this llmd (--addr)",
		Long: `Save an API key for llmctl itself, per llmd address, in a file only you can
read (` + "`llmctl config`" + ` shows where). Every later llmctl command against that
address uses it when no --api-key or $LLMD_API_KEY is given; either of those
always wins.

The key is read from stdin (a prompt, without echo, in a terminal). llmctl
first checks it against llmd: a key llmd refuses is not saved (--no-verify
saves it without asking llmd, e.g. before llmd runs).

"llmctl keys create --admin" saves the first admin key by itself.`,
		Example: `  llmctl login                                  # paste the key at the prompt
  echo "$KEY" | llmctl --addr node-b:8700 login
  llmctl keys create --tenant acme | llmctl login   # use a user key from now on`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := readKey(cmd, a.base)
			if err != nil {
				return err
			}
			admin := false
			if !noVerify {
				a.client.SetAPIKey(key)
				a.apiKey, a.keySource = key, "stdin" // for the messages of apiError
				if _, err := a.client.Models(cmd.Context()); err != nil {
					return a.apiError(err)
				}
				// Only an admin key may list the keys.
				_, err := a.client.Keys(cmd.Context())
				admin = err == nil
			}
			return a.saveKey(cmd.ErrOrStderr(), key, admin)
		},
	}
	cmd.Flags().BoolVar(&noVerify, "no-verify", false, "save the key without checking it against llmd")
	return cmd
}

// readKey reads an API key from stdin: after a prompt, without echo, in a
// terminal; else the first line.
func readKey(cmd *cobra.Command, base string) (string, error) {
	in := cmd.InOrStdin()
	var line string
	if f, ok := in.(*os.File); ok && isTerminal(f) {
		fmt.Fprintf(cmd.ErrOrStderr(), "API key for %s: ", base)
		b, err := term.ReadPassword(f.Fd())
		fmt.Fprintln(cmd.ErrOrStderr())
		if err != nil {
			return "", fmt.Errorf("read the key: %w", err)
		}
		line = string(b)
	} else {
		s, err := bufio.NewReader(io.LimitReader(in, 8192)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("read the key from stdin: %w", err)
		}
		line = s
	}
	key := strings.TrimSpace(line)
	if key == "" {
		return "", usageError(cmd, errors.New("no API key on stdin"))
	}
	return key, nil
}

// newLogoutCmd builds "llmctl logout".
func newLogoutCmd(a *app) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "logout",
		Short: "Forget the API key saved for this llmd (--addr)",
		Long: `Forget the API key llmctl saved for this llmd's address (or, with --all, for
every address). The key itself stays valid in llmd: revoke it with
"llmctl keys revoke ID" to end it.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, path, err := loadCredentials()
			if err != nil {
				return err
			}
			var gone []string
			if all {
				gone = f.Addrs()
				for _, addr := range gone {
					f.Delete(addr)
				}
			} else if f.Delete(a.base) {
				gone = []string{a.base}
			}
			if len(gone) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "no key saved for %s\n", a.base)
				return nil
			}
			if err := f.Save(path); err != nil {
				return err
			}
			for _, addr := range gone {
				fmt.Fprintf(cmd.ErrOrStderr(), "forgot the key saved for %s\n", addr)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "forget the keys of every address")
	return cmd
}

// configView is "llmctl config --json".
type configView struct {
	File string `json:"file"`
	// Addr and KeySource say which key a command against --addr uses.
	Addr      string      `json:"addr"`
	KeySource string      `json:"key_source"`
	Saved     []savedView `json:"saved"`
}

type savedView struct {
	Addr  string    `json:"addr"`
	KeyID string    `json:"key_id,omitempty"`
	Admin bool      `json:"admin"`
	Saved time.Time `json:"saved"`
}

// newConfigCmd builds "llmctl config".
func newConfigCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show llmctl's saved keys and which key a command would use",
		Long: `Show where llmctl keeps its saved keys (` + "`llmctl login`" + `), the addresses it has keys
for (by key id, never the key), and which key a command against --addr uses:
--api-key, else $LLMD_API_KEY, else the saved one.

"llmctl config token" prints that key, for curl:
  curl -H "Authorization: Bearer $(llmctl config token)" http://127.0.0.1:8700/v1/models`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, path, err := loadCredentials()
			if err != nil {
				return err
			}
			v := configView{File: path, Addr: a.base, KeySource: a.keySource, Saved: []savedView{}}
			if v.KeySource == "" {
				v.KeySource = "none"
			}
			for _, addr := range f.Addrs() {
				e := f.Hosts[addr]
				v.Saved = append(v.Saved, savedView{Addr: addr, KeyID: e.KeyID, Admin: e.Admin, Saved: e.Saved})
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(out, v)
			}
			fmt.Fprintf(out, "saved keys: %s\n", path)
			fmt.Fprintf(out, "key for %s: %s\n", a.base, describeKey(a.apiKey, a.keySource))
			if len(v.Saved) == 0 {
				fmt.Fprintln(out, "no saved keys (llmctl login saves one)")
				return nil
			}
			fmt.Fprintln(out)
			tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "ADDRESS\tKEY\tADMIN\tSAVED")
			for _, s := range v.Saved {
				admin := "no"
				if s.Admin {
					admin = "yes"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Addr, orDash(s.KeyID), admin, formatTime(s.Saved))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	cmd.AddCommand(&cobra.Command{
		Use:   "token",
		Short: "Print the API key llmctl uses for --addr (nothing when it has none)",
		Long: `Print the API key a command against --addr would send (--api-key, else
$LLMD_API_KEY, else the saved one), alone on stdout, for scripts and curl.
With no key it prints nothing and says so on stderr: until the first key is
made, llmd serves requests without one.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.apiKey == "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "llmctl: no API key for %s (llmctl login saves one)\n", a.base)
				return nil
			}
			_, err := fmt.Fprintln(cmd.OutOrStdout(), a.apiKey)
			return err
		},
	})
	return cmd
}

// describeKey names the key in use without showing it.
func describeKey(key, source string) string {
	if key == "" {
		return "none (requests go without a key)"
	}
	id := keyIDOf(key)
	if id == "" {
		id = "a key"
	}
	if source == keyFromSaved {
		return id + ", saved"
	}
	return id + ", from " + source
}
