package main

import (
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// newModelsCmd builds "llmctl models".
func newModelsCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "models",
		Short: "List the models llmd serves",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			models, err := a.client.Models(cmd.Context())
			if err != nil {
				return a.apiError(err)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 8, 3, ' ', 0)
			if _, err := tw.Write([]byte("ID\tCONTEXT\tOWNED BY\n")); err != nil {
				return err
			}
			for _, m := range models {
				ctxLen := "-"
				if m.MaxModelLen > 0 {
					ctxLen = strconv.Itoa(m.MaxModelLen)
				}
				owner := m.OwnedBy
				if owner == "" {
					owner = "-"
				}
				if _, err := tw.Write([]byte(m.ID + "\t" + ctxLen + "\t" + owner + "\n")); err != nil {
					return err
				}
			}
			return tw.Flush()
		},
	}
}
