package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// newStatsCmd builds "llmctl stats".
func newStatsCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show each model's KV cache, queues, prefix-cache hits, preemptions, degradation and quota counters (needs an admin key)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := a.client.Stats(cmd.Context())
			if err != nil {
				return a.adminError(err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "MODEL\tEXECUTOR\tKV USED\tCACHED\tRUNNING\tWAITING\tSWAPPED\tDONE\tPREFIX HIT\tPREEMPT (SWAP/RECOMP)\tDEGRADE")
			for _, m := range st.Models {
				used, hit := "-", "-"
				switch {
				case strings.HasPrefix(m.Executor, "upstream:"):
					// The engine's own KV-cache use, from its /metrics.
					used = fmt.Sprintf("%.1f%% (engine)", 100*float64(m.BlocksUsed)/float64(max(m.BlocksTotal, 1)))
				case m.BlocksTotal > 0:
					used = fmt.Sprintf("%.1f%% of %d", 100*float64(m.BlocksUsed)/float64(m.BlocksTotal), m.BlocksTotal)
				}
				if m.PrefixQueryTokens > 0 {
					hit = fmt.Sprintf("%.1f%%", 100*float64(m.PrefixHitTokens)/float64(m.PrefixQueryTokens))
				}
				degrade := m.Degrade
				if degrade == "" {
					degrade = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%d (%d/%d)\t%s\n", m.Model, m.Executor, used, m.BlocksCached,
					m.Running, m.Waiting, m.Swapped, m.Completed, hit, m.Preemptions, m.PreemptionsSwap, m.PreemptionsRecompute, degrade)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if q := st.Quota; q != nil {
				fallback := ""
				if q.FallbackActive {
					fallback = " (Redis failing: local fallback active)"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "\nquota (%s): %d allowed, %d denied, %d allowed and %d denied by the fallback, "+
					"%d state resets%s\n", q.Backend, q.Allow, q.Deny, q.ErrorAllowed, q.ErrorDenied, q.Resets, fallback)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the counters as JSON (the shape of GET /v1/stats)")
	return cmd
}
