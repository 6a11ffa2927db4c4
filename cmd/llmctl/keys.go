package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/llmd/llmd/api"
)

// createKeyOffline creates a key directly in the SQLite store under
// dataDir, for "llmctl keys create --data-dir" with no llmd running. It is
// nil in builds without the store; a file of its own sets it.
var createKeyOffline func(ctx context.Context, dataDir string, req api.KeyCreateRequest) (api.KeyCreated, error)

// errNoOfflineKeys is returned by "keys create --data-dir" when
// createKeyOffline is nil.
var errNoOfflineKeys = errors.New("offline key creation is not available in this build")

// newKeysCmd builds "llmctl keys".
func newKeysCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Create, list and revoke API keys (needs an admin key)",
		Args:  usageArgs(unknownCommand),
		RunE:  func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newKeysCreateCmd(a), newKeysListCmd(a), newKeysRevokeCmd(a))
	return cmd
}

func newKeysCreateCmd(a *app) *cobra.Command {
	var (
		req      api.KeyCreateRequest
		dataDir  string
		keyStdin bool
		save     bool
		noSave   bool
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create an API key and print it",
		Long: `Create an API key for a tenant and print it alone on stdout, so that
KEY=$(llmctl keys create ...) captures it. The key is shown only this once.

The tenant is created, with --tier, if it does not exist. Creating a key
needs an admin key, except while llmd has no key at all: then llmctl on
the same host as llmd may create the first (admin) key without one.

An admin key created while llmctl has no key for this llmd (the first one)
is also saved as llmctl's own key for the address, as "llmctl login" would,
so later llmctl commands keep working in any shell; --no-save does not save
it, and --save saves any key (replacing the saved one).`,
		Example: `  llmctl keys create --admin --name ops             # the first key: printed, and saved for llmctl
  llmctl keys create --tenant acme --tier enterprise --name "acme backend"
  # the same key on a second node of a cluster:
  echo "$KEY" | llmctl --addr node-b:8700 keys create --tenant acme --key-stdin`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTier(req.Tier); err != nil {
				return usageError(cmd, err)
			}
			if save && noSave {
				return usageError(cmd, errors.New("--save and --no-save contradict each other"))
			}
			if keyStdin {
				b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 4096))
				if err != nil {
					return err
				}
				if req.Key = strings.TrimSpace(string(b)); req.Key == "" {
					return usageError(cmd, errors.New("--key-stdin: no key on stdin"))
				}
			}
			var (
				kc  *api.KeyCreated
				err error
			)
			if cmd.Flags().Changed("data-dir") {
				kc, err = createOffline(cmd.Context(), dataDir, req)
				if err != nil {
					return err
				}
			} else if kc, err = a.client.CreateKey(cmd.Context(), req); err != nil {
				return a.adminError(err)
			}
			if _, err := fmt.Fprintln(cmd.OutOrStdout(), kc.Key); err != nil {
				return err
			}
			kind := "key"
			if kc.Admin {
				kind = "admin key"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "created %s %s for tenant %q; store it now, it will not be shown again\n",
				kind, kc.ID, kc.Tenant)
			// The first admin key made through llmd becomes llmctl's own:
			// without it every later command would get a 401.
			offline := cmd.Flags().Changed("data-dir")
			if save || (kc.Admin && !noSave && !offline && a.keySource == "") {
				return a.saveKey(cmd.ErrOrStderr(), kc.Key, kc.Admin)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Tenant, "tenant", "", `tenant that owns the key (default "default")`)
	f.StringVar(&req.Tier, "tier", "", "tier of the tenant if this creates it: enterprise, paid, free or batch (default paid)")
	f.BoolVar(&req.Admin, "admin", false, "the key may call the admin routes (keys, tenants, quotas)")
	f.StringVar(&req.Name, "name", "", "a label for the key")
	f.StringVar(&dataDir, "data-dir", "", "create the key directly in `DIR`, llmd's data directory, without a running llmd")
	f.BoolVar(&save, "save", false, "save the key as llmctl's key for --addr (as \"llmctl login\"), replacing the saved one")
	f.BoolVar(&noSave, "no-save", false, "do not save the first admin key for llmctl")
	f.BoolVar(&keyStdin, "key-stdin", false,
		"add the existing key read from stdin (made by another node) instead of a new one: one key for every node of a cluster")
	return cmd
}

// createOffline creates a key with createKeyOffline.
func createOffline(ctx context.Context, dataDir string, req api.KeyCreateRequest) (*api.KeyCreated, error) {
	if createKeyOffline == nil {
		return nil, errNoOfflineKeys
	}
	if dataDir == "" {
		return nil, errors.New("--data-dir is empty")
	}
	kc, err := createKeyOffline(ctx, dataDir, req)
	if err != nil {
		return nil, err
	}
	return &kc, nil
}

func newKeysListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the API keys (never the keys themselves)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			keys, err := a.client.Keys(cmd.Context())
			if err != nil {
				return a.adminError(err)
			}
			if asJSON {
				if keys == nil {
					keys = []api.KeyInfo{}
				}
				return writeJSON(cmd.OutOrStdout(), api.KeyList{Keys: keys})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTENANT\tADMIN\tNAME\tCREATED\tLAST USED\tREVOKED")
			for _, k := range keys {
				admin, lastUsed, revoked := "no", "never", "-"
				if k.Admin {
					admin = "yes"
				}
				if k.LastUsed != nil {
					lastUsed = formatTime(*k.LastUsed)
				}
				if k.Revoked != nil {
					revoked = formatTime(*k.Revoked)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Tenant, admin, orDash(k.Name),
					formatTime(k.Created), lastUsed, revoked)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}

func newKeysRevokeCmd(a *app) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an API key: llmd refuses it from now on",
		Long: `Revoke the API key with the given ID (the ID column of "llmctl keys list",
which is the start of the key). Requests with it are refused from now on.

Revoking the last active admin key needs --force: keys can then only be made
offline (llmctl keys create --data-dir), and llmd stays closed to requests
without a key (it never goes back to anonymous access once keys were made).`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.apiKey != "" && args[0] == a.apiKey {
				// Never echo a key back, not even in "no key with ID ...".
				return usageError(cmd, errors.New(`give the key's ID (see "llmctl keys list"), not the key itself`))
			}
			last, err := lastAdminKey(cmd, a, args[0])
			if err != nil {
				return a.adminError(err)
			}
			if last && !force {
				return &exitError{code: exitFailure, err: fmt.Errorf("%s is the last active admin key: without it no "+
					"one can manage keys, tenants or quotas through llmd (only offline, with llmctl keys create "+
					"--data-dir); pass --force to revoke it anyway", args[0])}
			}
			k, err := a.client.RevokeKey(cmd.Context(), args[0])
			if isNotFound(err) {
				return &exitError{code: exitFailure, err: fmt.Errorf(
					"no key with ID %q: see the IDs with \"llmctl keys list\"", args[0])}
			}
			if err != nil {
				return a.adminError(err)
			}
			if last {
				fmt.Fprintln(cmd.ErrOrStderr(), "llmctl: warning: no active admin key is left; make one offline with "+
					"\"llmctl keys create --admin --data-dir DIR\"")
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "revoked key %s of tenant %q\n", k.ID, k.Tenant)
			return err
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "revoke the last active admin key too")
	return cmd
}

// lastAdminKey reports whether id is the only active admin key.
func lastAdminKey(cmd *cobra.Command, a *app, id string) (bool, error) {
	keys, err := a.client.Keys(cmd.Context())
	if err != nil {
		return false, err
	}
	target, others := false, 0
	for _, k := range keys {
		if !k.Admin || k.Revoked != nil {
			continue
		}
		if k.ID == id {
			target = true
		} else {
			others++
		}
	}
	return target && others == 0, nil
}
