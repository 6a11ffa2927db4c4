package main

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// newNodesCmd builds "llmctl nodes".
func newNodesCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "List the cluster's nodes with their state, models and load (needs an admin key)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			nl, err := a.client.Nodes(cmd.Context())
			if err != nil {
				return a.adminError(err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), nl)
			}
			w := cmd.OutOrStdout()
			if !nl.Clustered {
				fmt.Fprintln(w, "not clustered (start llmd with --join or --gossip-addr); this node:")
			}
			tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATUS\tROLE\tAPI\tMODELS\tRUNNING\tWAITING\tKV USED\tTOK/S\tPREFIX KEYS")
			for _, n := range nl.Nodes {
				running, waiting, kv, rate := 0, 0, 0.0, 0.0
				models := slices.Clone(n.Models)
				for _, l := range n.Load {
					running += l.Running
					waiting += l.Waiting
					kv = max(kv, l.KVUsage)
					rate += l.TokensPerSecond
				}
				id := n.ID
				if n.Local {
					id += " (this)"
				}
				status := n.Status
				if n.Draining {
					status += ", draining"
				}
				role := n.Role
				if role == "" {
					role = "both"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%.0f%%\t%.0f\t%d\n", id, status, role, n.APIAddr, strings.Join(models, ","),
					running, waiting, 100*kv, rate, n.PrefixKeys)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}
