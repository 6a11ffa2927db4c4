package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/llmd/llmd/api"
)

// tiers are the tier names llmd knows, highest priority first.
var tiers = []string{api.TierEnterprise, api.TierPaid, api.TierFree, api.TierBatch}

// checkTier accepts "" (not given) and the names in tiers.
func checkTier(tier string) error {
	if tier == "" || slices.Contains(tiers, tier) {
		return nil
	}
	return fmt.Errorf("unknown tier %q: use one of %s", tier, strings.Join(tiers, ", "))
}

// newQuotaCmd builds "llmctl quota".
func newQuotaCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Show and set tenants' tiers, limits and usage (needs an admin key)",
		Args:  usageArgs(unknownCommand),
		RunE:  func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newQuotaGetCmd(a), newQuotaListCmd(a), newQuotaSetCmd(a))
	return cmd
}

func newQuotaGetCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get TENANT",
		Short: "Show a tenant's tier, limits and current usage",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := a.client.Quota(cmd.Context(), args[0])
			if isNotFound(err) {
				return &exitError{code: exitFailure, err: fmt.Errorf(
					"no tenant %q: see the tenants with \"llmctl tenants list\"", args[0])}
			}
			if err != nil {
				return a.adminError(err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), q)
			}
			return writeQuota(cmd.OutOrStdout(), q)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the quota as JSON")
	return cmd
}

func newQuotaListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List every tenant's tier and limits",
		Long: `List every tenant's tier and limits. A limit marked "*" is set for the
tenant; the others are its tier's defaults.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			quotas, err := a.client.Quotas(cmd.Context())
			if err != nil {
				return a.adminError(err)
			}
			if asJSON {
				if quotas == nil {
					quotas = []api.QuotaInfo{}
				}
				return writeJSON(cmd.OutOrStdout(), api.QuotaList{Quotas: quotas})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tTIER\tRPM\tTPM\tCONCURRENCY\tDAILY TOKENS")
			overrides := false
			for _, q := range quotas {
				cells := []string{q.Tenant, q.Tier}
				for _, l := range limitsOf(q) {
					cell := formatLimit(l.value)
					if l.overridden {
						cell += "*"
						overrides = true
					}
					cells = append(cells, cell)
				}
				fmt.Fprintln(tw, strings.Join(cells, "\t"))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if overrides {
				_, err = fmt.Fprintln(cmd.OutOrStdout(), "* set for the tenant; the other limits are its tier's defaults")
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}

// quotaSetOptions are the flags of "llmctl quota set".
type quotaSetOptions struct {
	tier                               string
	rpm, tpm, concurrency, dailyTokens int64
	hotShards, userRPM, userTPM        int64
	reservedTPS                        float64
	model                              string
	asJSON                             bool
}

func newQuotaSetCmd(a *app) *cobra.Command {
	o := &quotaSetOptions{}
	cmd := &cobra.Command{
		Use:   "set TENANT",
		Short: "Set a tenant's tier or limits",
		Long: `Set a tenant's tier or some of its limits, and print the resulting quota.
Only the flags given change; the tenant is created if it does not exist.

For each limit, a positive number sets it for this tenant, 0 makes it
unlimited, and -1 removes the tenant's own value so that its tier's default
applies again.

The capacity settings have no tier default; 0 clears them:
  --hot-shards N     split each of the tenant's Redis buckets into N
                     sub-buckets (a hot tenant: no single Redis key takes
                     all its traffic); with the in-memory quota it changes
                     nothing. llmd can also find hot tenants itself: started
                     with --redis and --hot-tenant-rps R, it splits a tenant
                     sending more than R requests in one second into
                     --hot-tenant-shards sub-buckets, agreed in Redis
  --user-rpm N       requests per minute for each end user of the tenant
  --user-tpm N       tokens per minute for each end user of the tenant
                     (the user is the OpenAI "user" field, Anthropic's
                     metadata.user_id, or the X-LLMD-User header)
  --reserved-tps N   output tokens per second the scheduler keeps for the
                     tenant, on --model M only when given (else every model)`,
		Example: `  llmctl quota set acme --tier enterprise
  llmctl quota set acme --rpm 600 --daily-tokens 0
  llmctl quota set acme --concurrency -1
  llmctl quota set acme --hot-shards 8
  llmctl quota set acme --user-rpm 20 --user-tpm 40000
  llmctl quota set acme --reserved-tps 200 --model mid`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := o.update(cmd)
			if err != nil {
				return usageError(cmd, err)
			}
			q, err := a.client.SetQuota(cmd.Context(), args[0], u)
			if err != nil {
				return a.adminError(err)
			}
			if o.asJSON {
				return writeJSON(cmd.OutOrStdout(), q)
			}
			return writeQuota(cmd.OutOrStdout(), q)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.tier, "tier", "", "tier: enterprise, paid, free or batch")
	f.Int64Var(&o.rpm, "rpm", 0, "requests per minute (0 unlimited, -1 the tier's default)")
	f.Int64Var(&o.tpm, "tpm", 0, "tokens per minute, input plus output (0 unlimited, -1 the tier's default)")
	f.Int64Var(&o.concurrency, "concurrency", 0, "requests in flight at once (0 unlimited, -1 the tier's default)")
	f.Int64Var(&o.dailyTokens, "daily-tokens", 0, "tokens per UTC day (0 unlimited, -1 the tier's default)")
	f.Int64Var(&o.hotShards, "hot-shards", 0, "Redis sub-buckets per bucket for a hot tenant (0 one bucket)")
	f.Int64Var(&o.userRPM, "user-rpm", 0, "requests per minute for each end user (0 none)")
	f.Int64Var(&o.userTPM, "user-tpm", 0, "tokens per minute for each end user (0 none)")
	f.Float64Var(&o.reservedTPS, "reserved-tps", 0, "output tokens per second reserved for the tenant (0 none)")
	f.StringVarP(&o.model, "model", "m", "", "the model --reserved-tps holds capacity on (default every model)")
	f.BoolVar(&o.asJSON, "json", false, "print the resulting quota as JSON")
	return cmd
}

// update builds the request from the flags given on the command line;
// the others stay nil so that llmd leaves them as they are.
func (o *quotaSetOptions) update(cmd *cobra.Command) (api.QuotaUpdate, error) {
	var u api.QuotaUpdate
	f := cmd.Flags()
	if f.Changed("tier") {
		if o.tier == "" {
			return u, errors.New("--tier is empty")
		}
		if err := checkTier(o.tier); err != nil {
			return u, err
		}
		u.Tier = &o.tier
	}
	for _, l := range []struct {
		flag string
		v    *int64
		dst  **int64
	}{
		{"rpm", &o.rpm, &u.RequestsPerMinute},
		{"tpm", &o.tpm, &u.TokensPerMinute},
		{"concurrency", &o.concurrency, &u.Concurrency},
		{"daily-tokens", &o.dailyTokens, &u.DailyTokens},
	} {
		if !f.Changed(l.flag) {
			continue
		}
		if *l.v < -1 {
			return u, fmt.Errorf("--%s %d: give a positive number, 0 for unlimited or -1 for the tier's default", l.flag, *l.v)
		}
		*l.dst = l.v
	}
	for _, c := range []struct {
		flag string
		v    *int64
		dst  **int64
	}{
		{"hot-shards", &o.hotShards, &u.HotShards},
		{"user-rpm", &o.userRPM, &u.UserRPM},
		{"user-tpm", &o.userTPM, &u.UserTPM},
	} {
		if !f.Changed(c.flag) {
			continue
		}
		if *c.v < 0 {
			return u, fmt.Errorf("--%s %d: give a positive number, or 0 to clear it", c.flag, *c.v)
		}
		*c.dst = c.v
	}
	if o.hotShards > maxHotShards {
		return u, fmt.Errorf("--hot-shards %d: at most %d", o.hotShards, maxHotShards)
	}
	if f.Changed("reserved-tps") {
		if o.reservedTPS < 0 || math.IsNaN(o.reservedTPS) || math.IsInf(o.reservedTPS, 0) {
			return u, fmt.Errorf("--reserved-tps %v: give output tokens per second, or 0 to clear it", o.reservedTPS)
		}
		u.ReservedTPS = &o.reservedTPS
		u.ReservedModel = &o.model // "" (no --model): every model
	} else if f.Changed("model") {
		return u, errors.New("--model goes with --reserved-tps: the model the reservation holds capacity on")
	}
	if u == (api.QuotaUpdate{}) {
		return u, errors.New("nothing to set: give --tier, --rpm, --tpm, --concurrency, --daily-tokens, " +
			"--hot-shards, --user-rpm, --user-tpm or --reserved-tps")
	}
	return u, nil
}

// limit is one of a tenant's limits, for display.
type limit struct {
	label      string
	value      int64
	overridden bool
}

// limitsOf returns q's limits in the order of the tables.
func limitsOf(q api.QuotaInfo) []limit {
	return []limit{
		{"requests per minute", q.Limits.RequestsPerMinute, slices.Contains(q.Overridden, "rpm")},
		{"tokens per minute", q.Limits.TokensPerMinute, slices.Contains(q.Overridden, "tpm")},
		{"concurrency", q.Limits.Concurrency, slices.Contains(q.Overridden, "concurrency")},
		{"daily tokens", q.Limits.DailyTokens, slices.Contains(q.Overridden, "daily_tokens")},
	}
}

// maxHotShards is the most sub-buckets llmd accepts (store.MaxHotShards).
const maxHotShards = 64

// formatTPS writes a rate with at most one decimal.
func formatTPS(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

// formatLimit writes a limit, 0 being unlimited.
func formatLimit(v int64) string {
	if v == 0 {
		return "unlimited"
	}
	return strconv.FormatInt(v, 10)
}

// writeQuota writes one tenant's quota for "quota get" and "quota set".
func writeQuota(w io.Writer, q *api.QuotaInfo) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Tenant:  %s\nTier:    %s\nLimits:\n", q.Tenant, q.Tier)
	for _, l := range limitsOf(*q) {
		src := "(tier)"
		if l.overridden {
			src = "(override)"
		}
		fmt.Fprintf(&b, "  %-20s %s %s\n", l.label, formatLimit(l.value), src)
	}
	if c := q.Capacity; c != nil {
		b.WriteString("Capacity:\n")
		if c.HotShards > 1 {
			fmt.Fprintf(&b, "  %-20s %d\n", "redis sub-buckets", c.HotShards)
		}
		if c.UserRPM > 0 {
			fmt.Fprintf(&b, "  %-20s %d\n", "per-user rpm", c.UserRPM)
		}
		if c.UserTPM > 0 {
			fmt.Fprintf(&b, "  %-20s %d\n", "per-user tpm", c.UserTPM)
		}
		if c.ReservedTPS > 0 {
			on := "every model"
			if c.ReservedModel != "" {
				on = c.ReservedModel
			}
			fmt.Fprintf(&b, "  %-20s %s output tokens/s on %s\n", "reserved", formatTPS(c.ReservedTPS), on)
		}
	}
	if u := q.Usage; u != nil {
		inFlight, daily := strconv.FormatInt(u.InFlight, 10), strconv.FormatInt(u.DailyTokensUsed, 10)
		if q.Limits.Concurrency > 0 {
			inFlight += " of " + strconv.FormatInt(q.Limits.Concurrency, 10)
		}
		if q.Limits.DailyTokens > 0 {
			daily += " of " + strconv.FormatInt(q.Limits.DailyTokens, 10)
		}
		requests, tokens := "unlimited", "unlimited"
		if q.Limits.RequestsPerMinute > 0 {
			requests = strconv.FormatInt(u.RequestsAvailable, 10)
		}
		if q.Limits.TokensPerMinute > 0 {
			tokens = strconv.FormatInt(u.TokensAvailable, 10)
		}
		b.WriteString("Usage:\n")
		for _, f := range [][2]string{
			{"in flight", inFlight},
			{"requests available", requests},
			{"tokens available", tokens},
			{"daily tokens used", daily},
			{"rejected", strconv.FormatUint(u.Rejected, 10)},
		} {
			fmt.Fprintf(&b, "  %-20s %s\n", f[0], f[1])
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
