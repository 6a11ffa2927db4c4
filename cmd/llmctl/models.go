package main

import (
	"fmt"
	"strconv"
	"strings"
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
			if _, err := tw.Write([]byte("ID\tARCH\tPARAMS\tQUANT\tCONTEXT\tOWNED BY\n")); err != nil {
				return err
			}
			for _, m := range models {
				ctxLen := "-"
				if m.MaxModelLen > 0 {
					ctxLen = strconv.Itoa(m.MaxModelLen)
				}
				row := []string{m.ID, orDash(m.Architecture), formatParams(m.ParameterCount), orDash(m.Quantization), ctxLen, orDash(m.OwnedBy)}
				if _, err := tw.Write([]byte(strings.Join(row, "\t") + "\n")); err != nil {
					return err
				}
			}
			return tw.Flush()
		},
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatParams writes a parameter count the way model cards do: 70.6B,
// 494M, 4.2M.
func formatParams(n int64) string {
	switch {
	case n <= 0:
		return "-"
	case n >= 1e9:
		return fmt.Sprintf("%.1fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return strconv.FormatInt(n, 10)
}
