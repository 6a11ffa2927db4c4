package main

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmd/llmd/api"
)

// usageGroupings are the values of "llmctl usage --by", as llmd accepts
// them.
var usageGroupings = []string{"day", "tenant", "model", "tier", "decision"}

// usageReportOptions are the flags of "llmctl usage".
type usageReportOptions struct {
	query         api.UsageQuery
	asJSON, asCSV bool
	// cluster asks every live member and merges their reports, waiting
	// up to nodeTimeout for each.
	cluster     bool
	nodeTimeout time.Duration
}

// defaultNodeTimeout bounds each member's answer to "llmctl usage
// --cluster".
const defaultNodeTimeout = 10 * time.Second

// newUsageCmd builds "llmctl usage".
func newUsageCmd(a *app) *cobra.Command {
	o := &usageReportOptions{}
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Report requests, tokens and cost per day, tenant, model, tier or decision (needs an admin key)",
		Long: `Report what llmd served in a window of time: requests, tokens and their
cost, one row per day (the default), tenant, model, tier or model-choice
decision (router/rule, such as auto/short-chat; "(none)" for requests to a
model named directly), then a total.

REQUESTS counts the requests that reached the engine, CANCELLED and ERRORS
among them; REJECTED counts those refused before any compute (quota,
overload). INPUT, CACHED and OUTPUT count only tokens really processed and
generated. COST comes from the token prices configured in llmd; "-" when a
model in the row has none. By decision, COST/1M is what a million of the
row's tokens (input plus output) cost. MEAN TTFT and MEAN ITL, when llmd
sends them, are the mean time to first token and inter-token latency of the
requests that finished normally.

A second table, when llmd sends one, shows what a million output tokens
cost in GPU time, per model and tier. A last one, when a tenant holds
provisioned throughput (llmctl quota set --reserved-tps), shows each
reservation against the rate its model's engine delivers the tenant now
(over the last 2 s) and the tenant's mean output rate over the window.
With --cluster the delivered rates and output tokens are summed over the
nodes (each engine holds the reservation on its own; NODES counts those
that report it) against the reservation, and the window mean is over the
merged window.

Each llmd keeps its own ledger, and a request forwarded to another node is
billed by the node it entered, so the members' reports add up. --cluster
asks the node at --addr for the cluster's members (GET /v1/admin/nodes),
then every alive or suspect member with an API address for its report, with
the same query and API key (the key must exist on every node), in parallel,
waiting up to --node-timeout for each, and merges the reports: rows with the
same key are summed; a cost is known when every node priced its part; the
cost per million output tokens is recomputed from the summed GPU-hours (each
at its node's GPU-hour price) and output tokens. The window shown spans the
nodes' windows (each reads a relative --since on its own clock). A node
skipped or not answering is named on stderr and its usage is not in the
report; the command fails only when no node answers. Without a cluster,
--cluster changes nothing.

--since is a duration back from now ("24h", "90m", or "7d" for days) or an
RFC 3339 time, --until an RFC 3339 time; llmd checks both. The window
defaults to the last 24 hours. Times are shown in UTC.`,
		Example: `  llmctl usage
  llmctl usage --since 7d --by tenant
  llmctl usage --since 7d --by decision
  llmctl usage --tenant acme --by model --since 2026-03-01T00:00:00Z --until 2026-04-01T00:00:00Z
  llmctl usage --since 30d --csv > usage.csv
  llmctl usage --cluster --since 7d --by model`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(cmd); err != nil {
				return usageError(cmd, err)
			}
			if o.cluster {
				return a.clusterUsage(cmd, o)
			}
			return a.usage(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.query.Tenant, "tenant", "", "only this tenant's usage")
	f.StringVar(&o.query.Model, "model", "", "only this model's usage")
	f.StringVar(&o.query.Since, "since", "", `start of the window: a duration back from now ("24h", "7d") or an RFC 3339 time (default 24h)`)
	f.StringVar(&o.query.Until, "until", "", "end of the window, an RFC 3339 time (default now)")
	f.StringVar(&o.query.By, "by", "", "one row per day, tenant, model, tier or decision (default day)")
	f.BoolVar(&o.asJSON, "json", false, "print the report as JSON")
	f.BoolVar(&o.asCSV, "csv", false, "print the rows and the total as CSV")
	f.BoolVar(&o.cluster, "cluster", false, "ask every live member of llmd's cluster and merge their reports")
	f.DurationVar(&o.nodeTimeout, "node-timeout", defaultNodeTimeout, "with --cluster: how long to wait for each node")
	return cmd
}

// usage runs "llmctl usage" against the node at --addr.
func (a *app) usage(cmd *cobra.Command, o *usageReportOptions) error {
	r, err := a.client.Usage(cmd.Context(), o.query)
	if err := a.usageError(cmd, err); err != nil {
		return err
	}
	switch {
	case o.asJSON:
		return writeJSON(cmd.OutOrStdout(), r)
	case o.asCSV:
		return writeUsageCSV(cmd.OutOrStdout(), r)
	}
	if err := writeUsageReport(cmd.OutOrStdout(), r); err != nil {
		return err
	}
	return writeReservations(cmd.OutOrStdout(), r)
}

// usageError maps an error of GET /v1/admin/usage: a 400 means that llmd
// refused a flag's value (--since or --until most likely).
func (a *app) usageError(cmd *cobra.Command, err error) error {
	var se *api.StatusError
	if errors.As(err, &se) && se.StatusCode == http.StatusBadRequest {
		return usageError(cmd, errors.New(se.Message))
	}
	return a.adminError(err)
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
	if o.nodeTimeout <= 0 {
		return fmt.Errorf("--node-timeout must be positive, got %s", o.nodeTimeout)
	}
	if cmd.Flags().Changed("node-timeout") && !o.cluster {
		return errors.New("--node-timeout goes with --cluster")
	}
	return nil
}

// usageKeyName names the key column of r's rows: "day", "tenant", "model",
// "tier" or "decision", else "key".
func usageKeyName(r *api.UsageReport) string {
	if slices.Contains(usageGroupings, r.By) {
		return r.By
	}
	return "key"
}

// writeUsageReport writes r as the tables of "llmctl usage"; the lines of
// extra, if any, follow the first line.
func writeUsageReport(w io.Writer, r *api.UsageReport, extra ...string) error {
	tenant, model := "all tenants", "all models"
	if r.Tenant != "" {
		tenant = "tenant " + r.Tenant
	}
	if r.Model != "" {
		model = "model " + r.Model
	}
	if _, err := fmt.Fprintf(w, "usage from %s to %s (UTC) by %s, %s, %s\n",
		formatTime(r.Since), formatTime(r.Until), usageKeyName(r), tenant, model); err != nil {
		return err
	}
	for _, l := range extra {
		if _, err := fmt.Fprintln(w, l); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}

	// Optional columns: the cost per million tokens by decision, and the
	// latencies when llmd sends them (a report of an older llmd has none).
	byDecision := r.By == "decision"
	latencies := r.Total.Finished > 0 || slices.ContainsFunc(r.Rows, func(u api.UsageRow) bool { return u.Finished > 0 })
	header := strings.ToUpper(usageKeyName(r)) + "\tREQUESTS\tREJECTED\tCANCELLED\tERRORS\tINPUT\tCACHED\tOUTPUT\tCOST"
	if byDecision {
		header += "\tCOST/1M"
	}
	if latencies {
		header += "\tMEAN TTFT\tMEAN ITL"
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	row := func(key string, u api.UsageRow) {
		cells := []string{key}
		for _, n := range []int64{u.Requests, u.Rejected, u.Cancelled, u.Errors, u.InputTokens, u.CachedTokens, u.OutputTokens} {
			cells = append(cells, groupDigits(n))
		}
		cells = append(cells, formatCost(u.Cost, r.Currency))
		if byDecision {
			cells = append(cells, formatCost(u.CostPerMillionTokens(), r.Currency))
		}
		if latencies {
			cells = append(cells, formatLatency(u.MeanTTFTMs, u.Finished), formatLatency(u.MeanITLMs, u.Finished))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	for _, u := range r.Rows {
		key := u.Key
		if byDecision && key == "" {
			key = "(none)"
		}
		row(key, u)
	}
	row("TOTAL", r.Total)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.OutputCosts) == 0 {
		return nil
	}

	price := "no GPU-hour price configured"
	switch {
	case r.GPUHourPrice > 0:
		price = "GPU time at " + strings.TrimSpace(strconv.FormatFloat(r.GPUHourPrice, 'f', -1, 64)+" "+r.Currency) + "/GPU-hour"
	case slices.ContainsFunc(r.OutputCosts, func(c api.OutputCost) bool { return c.CostPerMillion != nil }):
		// A merged report of nodes with different prices.
		price = "GPU time at each node's GPU-hour price"
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

// formatLatency writes a mean latency in milliseconds to one decimal, "-"
// when no request finished (there is no mean).
func formatLatency(ms float64, finished int64) string {
	if finished <= 0 {
		return "-"
	}
	return strconv.FormatFloat(ms, 'f', 1, 64) + "ms"
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

// usageSource is a cluster member to ask for its usage report.
type usageSource struct {
	node, addr string // the member's id and the base URL asked
	client     *api.Client
}

// nodeUsage is a member's usage report, or why there is none.
type nodeUsage struct {
	node, addr string
	report     *api.UsageReport
	err        error
}

// clusterUsageReport is the report of "llmctl usage --cluster --json": the
// merged report, and which members it covers.
type clusterUsageReport struct {
	api.UsageReport
	// Nodes are the members whose reports are merged in, in id order.
	Nodes []string `json:"nodes"`
	// Missing are the members whose usage is not in it: skipped (dead,
	// left, or without a usable API address) or not answering.
	Missing []string `json:"missing_nodes,omitempty"`
	// Notes say what the merge could not add up exactly.
	Notes []string `json:"notes,omitempty"`
}

// clusterUsage runs "llmctl usage --cluster": it asks every live member of
// the cluster of the node at --addr for its report and merges them. Without
// a cluster it is plain "llmctl usage".
func (a *app) clusterUsage(cmd *cobra.Command, o *usageReportOptions) error {
	ctx, stderr := cmd.Context(), cmd.ErrOrStderr()
	nl, err := a.client.Nodes(ctx)
	if isNotFound(err) {
		fmt.Fprintf(stderr, "llmctl: llmd at %s does not list cluster members; its own report follows\n", a.base)
		return a.usage(cmd, o)
	}
	if err != nil {
		return a.adminError(err)
	}
	if !nl.Clustered {
		return a.usage(cmd, o)
	}
	sources, skipped := a.usageSources(nl)
	var missing []string
	for _, s := range skipped {
		named := s.node
		if s.addr != "" {
			named += " (" + s.addr + ")"
		}
		fmt.Fprintf(stderr, "llmctl: node %s: skipped: %s; its usage is not in the report\n", named, s.why)
		missing = append(missing, s.node)
	}
	results := fetchUsage(ctx, sources, o.query, o.nodeTimeout)
	var answered []nodeUsage
	for _, r := range results {
		var se *api.StatusError
		switch {
		case r.err == nil:
			answered = append(answered, r)
		case errors.As(r.err, &se) && se.StatusCode == http.StatusBadRequest:
			return usageError(cmd, errors.New(se.Message))
		case ctx.Err() != nil:
			return a.adminError(ctx.Err())
		}
	}
	for _, r := range results {
		if r.err != nil {
			fmt.Fprintf(stderr, "llmctl: node %s (%s): %s\n", r.node, r.addr, nodeErrorText(r.err, o.nodeTimeout))
			missing = append(missing, r.node)
		}
	}
	if len(answered) == 0 {
		return &exitError{code: exitFailure, err: fmt.Errorf("no cluster member answered (%d asked)", len(sources))}
	}
	merged, notes := mergeUsage(answered)
	out := clusterUsageReport{UsageReport: merged, Notes: notes}
	for _, r := range answered {
		out.Nodes = append(out.Nodes, r.node)
	}
	slices.Sort(out.Nodes)
	slices.Sort(missing)
	out.Missing = missing
	w := cmd.OutOrStdout()
	switch {
	case o.asJSON:
		return writeJSON(w, out)
	case o.asCSV:
		for _, n := range notes {
			fmt.Fprintf(stderr, "llmctl: note: %s\n", n)
		}
		return writeUsageCSV(w, &out.UsageReport)
	}
	if err := writeUsageReport(w, &out.UsageReport, append([]string{nodesLine(out.Nodes, out.Missing)}, notes...)...); err != nil {
		return err
	}
	return writeClusterReservations(w, out.Reservations, answered)
}

// skippedNode is a member "llmctl usage --cluster" does not ask: its id,
// advertised API address and why.
type skippedNode struct{ node, addr, why string }

// usageSources are the members to ask for their usage: this node (through
// --addr) and every other alive or suspect member with an API address;
// skipped are the others, with the reason.
func (a *app) usageSources(nl *api.NodeList) (sources []usageSource, skipped []skippedNode) {
	for _, n := range nl.Nodes {
		if n.Local {
			sources = append(sources, usageSource{node: n.ID, addr: a.base, client: a.client})
			continue
		}
		if n.Status != "alive" && n.Status != "suspect" {
			skipped = append(skipped, skippedNode{n.ID, n.APIAddr, "it is " + n.Status})
			continue
		}
		if n.APIAddr == "" {
			skipped = append(skipped, skippedNode{n.ID, "", "it has no API address"})
			continue
		}
		base, err := memberBase(n.APIAddr, a.base)
		if err != nil {
			skipped = append(skipped, skippedNode{n.ID, n.APIAddr, err.Error()})
			continue
		}
		c, err := api.NewClient(base, nil)
		if err != nil {
			skipped = append(skipped, skippedNode{n.ID, n.APIAddr, err.Error()})
			continue
		}
		c.SetAPIKey(a.apiKey)
		sources = append(sources, usageSource{node: n.ID, addr: base, client: c})
	}
	return sources, skipped
}

// memberBase is the base URL of a member's API: its advertised address,
// with the scheme of base (--addr) when it has none. An unspecified host
// (0.0.0.0, ::) names no machine: it is refused rather than read as this
// one.
func memberBase(apiAddr, base string) (string, error) {
	s := apiAddr
	if !strings.Contains(s, "://") {
		scheme := "http"
		if u, err := url.Parse(base); err == nil && u.Scheme != "" {
			scheme = u.Scheme
		}
		s = scheme + "://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("its API address %q is not host:port or a URL", apiAddr)
	}
	if ip := net.ParseIP(u.Hostname()); u.Hostname() == "" || (ip != nil && ip.IsUnspecified()) {
		return "", fmt.Errorf("its API address %s names no host (start that llmd with --advertise-api)", apiAddr)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// fetchUsage asks every source for its report of q in parallel, waiting up
// to timeout for each, and returns the answers in the order of sources.
func fetchUsage(ctx context.Context, sources []usageSource, q api.UsageQuery, timeout time.Duration) []nodeUsage {
	out := make([]nodeUsage, len(sources))
	var wg sync.WaitGroup
	for i, s := range sources {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			r, err := s.client.Usage(ctx, q)
			out[i] = nodeUsage{node: s.node, addr: s.addr, report: r, err: err}
		})
	}
	wg.Wait()
	return out
}

// nodeErrorText says in a few words why a member gave no report.
func nodeErrorText(err error, timeout time.Duration) string {
	var (
		se *api.StatusError
		oe *net.OpError
		ue *url.Error
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("unreachable: no answer within %s", timeout)
	case errors.As(err, &se) && se.StatusCode == http.StatusUnauthorized:
		return "refused the API key (" + se.Message + "): each llmd checks keys in its own store; create the key there too"
	case errors.As(err, &se) && se.StatusCode == http.StatusForbidden:
		return "refused: the API key is not an admin key there"
	case errors.As(err, &se):
		return se.Error()
	case errors.As(err, &oe):
		return "unreachable: " + oe.Err.Error()
	case errors.As(err, &ue):
		return "unreachable: " + ue.Err.Error()
	}
	return "unreachable: " + err.Error()
}

// nodesLine names the members a merged report covers: "3 nodes: a, b, c",
// then those missing.
func nodesLine(nodes, missing []string) string {
	noun := "nodes"
	if len(nodes) == 1 {
		noun = "node"
	}
	s := fmt.Sprintf("%d %s: %s", len(nodes), noun, strings.Join(nodes, ", "))
	if len(missing) > 0 {
		s += "; not in the report: " + strings.Join(missing, ", ")
	}
	return s
}

// costSum adds up the costs of rows from several nodes: the sum is known
// when some node priced the group and every node that processed tokens in
// it priced them (as llmd does for the rows of one report).
type costSum struct {
	sum           float64
	seen, unknown bool
}

func (c *costSum) add(u api.UsageRow) {
	switch {
	case u.Cost != nil:
		c.sum += *u.Cost
		c.seen = true
	case u.InputTokens+u.OutputTokens > 0:
		c.unknown = true
	}
}

func (c costSum) value() *float64 {
	if c.unknown || !c.seen {
		return nil
	}
	v := c.sum
	return &v
}

// mergeUsage merges the reports of one query from several nodes into one.
// Rows with the same key are summed (requests and tokens), sorted by key,
// their mean latencies averaged weighted by finished requests
// ([api.UsageRow.AddCounts]); a cost is summed when known everywhere (see
// costSum). The window is the
// union of the nodes' windows. Per model and tier, GPUs, GPU-hours and
// output tokens are summed and the cost per million output tokens is
// recomputed as the GPU-hours' cost, each at its node's GPU-hour price, over
// the output tokens; the report's GPU-hour price is the nodes' common one,
// else 0. Nodes pricing in different currencies cannot be added up: every
// cost is then left out. notes say what could not be merged exactly.
// answered must not be empty; its reports are not modified.
func mergeUsage(answered []nodeUsage) (merged api.UsageReport, notes []string) {
	first := answered[0].report
	merged = api.UsageReport{Since: first.Since, Until: first.Until, By: first.By, Tenant: first.Tenant,
		Model: first.Model, Currency: first.Currency, Rows: []api.UsageRow{}, OutputCosts: []api.OutputCost{},
		Total: api.UsageRow{Key: first.Total.Key}}

	// Currencies of the nodes that price anything.
	currencies := map[string][]string{}
	for _, a := range answered {
		if pricesAnything(a.report) {
			currencies[a.report.Currency] = append(currencies[a.report.Currency], a.node)
		}
	}
	mixed := len(currencies) > 1
	if mixed {
		var parts []string
		for _, c := range slices.Sorted(maps.Keys(currencies)) {
			parts = append(parts, fmt.Sprintf("%s on %s", orDash(c), strings.Join(currencies[c], ", ")))
		}
		notes = append(notes, "costs left out: the nodes price in different currencies ("+strings.Join(parts, "; ")+")")
		merged.Currency = ""
	} else {
		for c := range currencies {
			merged.Currency = c
		}
	}

	rows := map[string]*api.UsageRow{}
	costs := map[string]*costSum{}
	var total costSum
	type mt struct{ model, tier string }
	ocs := map[mt]*api.OutputCost{}
	gpuCost := map[mt]*costSum{}
	prices := map[float64]bool{}
	for _, a := range answered {
		r := a.report
		if r.Since.Before(merged.Since) {
			merged.Since = r.Since
		}
		if r.Until.After(merged.Until) {
			merged.Until = r.Until
		}
		for _, u := range r.Rows {
			row, ok := rows[u.Key]
			if !ok {
				row, costs[u.Key] = &api.UsageRow{Key: u.Key}, &costSum{}
				rows[u.Key] = row
			}
			row.AddCounts(u)
			costs[u.Key].add(u)
		}
		merged.Total.AddCounts(r.Total)
		total.add(r.Total)
		for _, c := range r.OutputCosts {
			k := mt{c.Model, c.Tier}
			oc, ok := ocs[k]
			if !ok {
				oc, gpuCost[k] = &api.OutputCost{Model: c.Model, Tier: c.Tier}, &costSum{}
				ocs[k] = oc
			}
			oc.GPUs += c.GPUs
			oc.GPUHours += c.GPUHours
			oc.OutputTokens += c.OutputTokens
			if c.GPUHours > 0 {
				prices[r.GPUHourPrice] = true
				if r.GPUHourPrice > 0 {
					gpuCost[k].add(api.UsageRow{Cost: new(c.GPUHours * r.GPUHourPrice)})
				} else {
					gpuCost[k].unknown = true
				}
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(rows)) {
		row := rows[k]
		if !mixed {
			row.Cost = costs[k].value()
		}
		merged.Rows = append(merged.Rows, *row)
	}
	if !mixed {
		merged.Total.Cost = total.value()
	}
	keys := slices.SortedFunc(maps.Keys(ocs), func(a, b mt) int {
		return cmp.Or(strings.Compare(a.model, b.model), strings.Compare(a.tier, b.tier))
	})
	for _, k := range keys {
		oc := ocs[k]
		if c := gpuCost[k].value(); c != nil && !mixed && *c > 0 && oc.OutputTokens > 0 {
			oc.CostPerMillion = new(*c / float64(oc.OutputTokens) * 1e6)
		}
		merged.OutputCosts = append(merged.OutputCosts, *oc)
	}
	switch {
	case len(prices) == 1:
		for p := range prices {
			merged.GPUHourPrice = p
		}
	case len(prices) > 1:
		var parts []string
		for _, a := range answered {
			if a.report.GPUHourPrice > 0 {
				parts = append(parts, fmt.Sprintf("%s %s", a.node, strconv.FormatFloat(a.report.GPUHourPrice, 'f', -1, 64)))
			} else {
				parts = append(parts, a.node+" none")
			}
		}
		notes = append(notes, "GPU time is priced at each node's GPU-hour price ("+strings.Join(parts, ", ")+")")
	default:
		merged.GPUHourPrice = first.GPUHourPrice
	}
	res, resNotes := mergeReservations(answered, merged.Until.Sub(merged.Since).Seconds())
	merged.Reservations = res
	notes = append(notes, resNotes...)
	return merged, notes
}

// pricesAnything tells whether a report carries a cost.
func pricesAnything(r *api.UsageReport) bool {
	if r.GPUHourPrice > 0 || r.Total.Cost != nil {
		return true
	}
	for _, u := range r.Rows {
		if u.Cost != nil {
			return true
		}
	}
	return false
}
