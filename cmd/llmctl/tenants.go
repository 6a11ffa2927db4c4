package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/llmd/llmd/api"
)

// newTenantsCmd builds "llmctl tenants".
func newTenantsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenants",
		Short: "List tenants (needs an admin key)",
		Args:  usageArgs(unknownCommand),
		RunE:  func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newTenantsListCmd(a))
	return cmd
}

func newTenantsListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the tenants with their tier and number of keys",
		Long: `List the tenants with their tier and their number of keys that are not
revoked. Tenants are created with their first key ("llmctl keys create
--tenant") or quota ("llmctl quota set").`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			tenants, err := a.client.Tenants(cmd.Context())
			if err != nil {
				return a.adminError(err)
			}
			if asJSON {
				if tenants == nil {
					tenants = []api.TenantInfo{}
				}
				return writeJSON(cmd.OutOrStdout(), api.TenantList{Tenants: tenants})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTIER\tKEYS\tCREATED")
			for _, t := range tenants {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", t.ID, t.Tier, t.Keys, formatTime(t.Created))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}
