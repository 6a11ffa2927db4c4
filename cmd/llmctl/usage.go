package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/llmd/llmd/api"
)

// usageGroupings are the values of "llmctl usage --by", as llmd accepts
// them.
var usageGroupings = []string{"day", "tenant", "model", "tier"}

// usageReportOptions are the flags of "llmctl usage".
type usageReportOptions struct {
	query         api.UsageQuery
	asJSON, asCSV bool
}

// newUsageCmd builds "llmctl usage".
func newUsageCmd(a *app) *cobra.Command {
	o := &usageReportOptions{}
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Report requests, tokens and cost per day, tenant, model or tier (needs an admin key)",
		Long: `Report what llmd served in a window of time: requests, tokens and their
cost, one row per day (the default), tenant, model or tier, then a total.

REQUESTS counts the requests that reached the engine, CANCELLED and ERRORS
among them; REJECTED counts those refused before any compute (quota,
overload). INPUT, CACHED and OUTPUT count only tokens really processed and
generated. COST comes from the token prices configured in llmd; "-" when a
model in the row has none.

A second table, when llmd sends one, shows what a million output tokens
cost in GPU time, per model and tier.

--since is a duration back from now ("24h", "90m", or "7d" for days) or an
RFC 3339 time, --until an RFC 3339 time; llmd checks both. The window
defaults to the last 24 hours. Times are shown in UTC.`,
		Example: `  llmctl usage
  llmctl usage --since 7d --by tenant
  llmctl usage --tenant acme --by model --since 2026-03-01T00:00:00Z --until 2026-04-01T00:00:00Z
  llmctl usage --since 30d --csv > usage.csv`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(cmd); err != nil {
				return usageError(cmd, err)
			}
			r, err := a.client.Usage(cmd.Context(), o.query)
			var se *api.StatusError
			if errors.As(err, &se) && se.StatusCode == http.StatusBadRequest {
				// llmd refused a flag's value, --since or --until most likely.
				return usageError(cmd, errors.New(se.Message))
			}
			if err != nil {
				return a.adminError(err)
			}
			switch {
			case o.asJSON:
				return writeJSON(cmd.OutOrStdout(), r)
			case o.asCSV:
				return writeUsageCSV(cmd.OutOrStdout(), r)
			}
			return writeUsageReport(cmd.OutOrStdout(), r)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.query.Tenant, "tenant", "", "only this tenant's usage")
	f.StringVar(&o.query.Model, "model", "", "only this model's usage")
	f.StringVar(&o.query.Since, "since", "", `start of the window: a duration back from now ("24h", "7d") or an RFC 3339 time (default 24h)`)
	f.StringVar(&o.query.Until, "until", "", "end of the window, an RFC 3339 time (default now)")
	f.StringVar(&o.query.By, "by", "", "one row per day, tenant, model or tier (default day)")
	f.BoolVar(&o.asJSON, "json", false, "print the report as JSON")
	f.BoolVar(&o.asCSV, "csv", false, "print the rows and the total as CSV")
	return cmd
}

// check rejects the flag combinations llmctl can tell are wrong without
// asking llmd.
func (o *usageReportOptions) check(cmd *cobra.Command) error {
	if o.asJSON && o.asCSV {
		return errors.New("give --json or --csv, not both")
	}
	if cmd.Flags().Changed("by") && !slices.Contains(usageGroupings, o.query.By) {
		return fmt.Errorf("unknown --by %q: use one of %s", o.query.By, strings.Join(usageGroupings, ", "))
	}
	return nil
}

// usageKeyName names the key column of r's rows: "day", "tenant", "model"
// or "tier", else "key".
func usageKeyName(r *api.UsageReport) string {
	if slices.Contains(usageGroupings, r.By) {
		return r.By
	}
	return "key"
}

// writeUsageReport writes r as the tables of "llmctl usage".
func writeUsageReport(w io.Writer, r *api.UsageReport) error {
	tenant, model := "all tenants", "all models"
	if r.Tenant != "" {
		tenant = "tenant " + r.Tenant
	}
	if r.Model != "" {
		model = "model " + r.Model
	}
	if _, err := fmt.Fprintf(w, "usage from %s to %s (UTC) by %s, %s, %s\n\n",
		formatTime(r.Since), formatTime(r.Until), usageKeyName(r), tenant, model); err != nil {
		return err
	}

	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tREQUESTS\tREJECTED\tCANCELLED\tERRORS\tINPUT\tCACHED\tOUTPUT\tCOST\n",
		strings.ToUpper(usageKeyName(r)))
	row := func(key string, u api.UsageRow) {
		cells := []string{key}
		for _, n := range []int64{u.Requests, u.Rejected, u.Cancelled, u.Errors, u.InputTokens, u.CachedTokens, u.OutputTokens} {
			cells = append(cells, groupDigits(n))
		}
		cells = append(cells, formatCost(u.Cost, r.Currency))
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	for _, u := range r.Rows {
		row(u.Key, u)
	}
	row("TOTAL", r.Total)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.OutputCosts) == 0 {
		return nil
	}

	price := "no GPU-hour price configured"
	if r.GPUHourPrice > 0 {
		price = "GPU time at " + strings.TrimSpace(strconv.FormatFloat(r.GPUHourPrice, 'f', -1, 64)+" "+r.Currency) + "/GPU-hour"
	}
	if _, err := fmt.Fprintf(w, "\ncost per 1M output tokens (%s)\n", price); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tTIER\tGPUS\tGPU-HOURS\tOUTPUT\tCOST/1M")
	for _, c := range r.OutputCosts {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%s\t%s\n", c.Model, orDash(c.Tier), c.GPUs, c.GPUHours,
			groupDigits(c.OutputTokens), formatCost(c.CostPerMillion, r.Currency))
	}
	return tw.Flush()
}

// writeUsageCSV writes r's rows and then its total, keyed "TOTAL", as CSV
// with a header line. Numbers are written in full, without separators; an
// unknown cost is an empty cell.
func writeUsageCSV(w io.Writer, r *api.UsageReport) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{usageKeyName(r), "requests", "rejected", "cancelled", "errors",
		"input_tokens", "cached_tokens", "output_tokens", "cost", "currency"})
	row := func(key string, u api.UsageRow) {
		cells := []string{key}
		for _, n := range []int64{u.Requests, u.Rejected, u.Cancelled, u.Errors, u.InputTokens, u.CachedTokens, u.OutputTokens} {
			cells = append(cells, strconv.FormatInt(n, 10))
		}
		cost := ""
		if u.Cost != nil {
			cost = strconv.FormatFloat(*u.Cost, 'f', -1, 64)
		}
		_ = cw.Write(append(cells, cost, r.Currency))
	}
	for _, u := range r.Rows {
		row(u.Key, u)
	}
	row("TOTAL", r.Total)
	cw.Flush()
	return cw.Error()
}

// formatCost writes a cost to four decimals with its currency (a small
// non-zero cost to three significant digits, so it does not read as zero),
// "-" when it is unknown.
func formatCost(cost *float64, currency string) string {
	if cost == nil {
		return "-"
	}
	s := strconv.FormatFloat(*cost, 'f', 4, 64)
	if c := *cost; c != 0 && math.Abs(c) < 0.01 {
		// Three significant digits, in plain notation.
		prec := 2 - int(math.Floor(math.Log10(math.Abs(c))))
		s = strings.TrimRight(strconv.FormatFloat(c, 'f', prec, 64), "0")
	}
	if currency != "" {
		s += " " + currency
	}
	return s
}

// groupDigits writes n with a comma between groups of three digits:
// 1234567 is "1,234,567".
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	sign := ""
	if n < 0 {
		sign, s = "-", s[1:]
	}
	var b strings.Builder
	b.WriteString(sign)
	for i, d := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return b.String()
}
