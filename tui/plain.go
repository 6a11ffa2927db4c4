package tui

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llmd/llmd/api"
)

// PlainWidth is the width "llmctl top --once" fits: every line is at most
// this many columns when model, tenant and node names are short (up to
// about 12 characters); longer names widen their tables.
const PlainWidth = 80

// WriteSnapshot writes s as plain text, with no escape sequences, for
// "llmctl top --once": the node, then tables of models (state, then
// latency), running/waiting sequences per tier, GPUs, requests (who and
// where, then progress), tenants, and the cluster's members when llmd is
// clustered, each within [PlainWidth] columns. Request ids are written
// whole. Tokens per second are not in it: they need two snapshots.
func WriteSnapshot(w io.Writer, s *api.Snapshot) error {
	pw := &plainWriter{w: w}
	node := s.Node
	if node == "" {
		node = "(unnamed)"
	}
	at := ""
	if !s.Time.IsZero() {
		at = "  at " + s.Time.UTC().Format(time.RFC3339)
	}
	cluster := notClustered
	if len(s.Cluster) > 0 {
		cluster = "cluster: " + clusterSummary(clusterCounts(s))
	}
	pw.printf("node %s  up %s%s  (%s)\n", node, fmtAge(s.Uptime), at, cluster)

	pw.section("MODELS", "MODEL\tEXECUTOR\tKV\tUSED\tCACHED\tFREE\tRUN\tWAIT\tSWAP")
	for _, m := range s.Models {
		free := max(m.BlocksTotal-m.BlocksUsed-m.BlocksCached, 0)
		pw.row(m.Model, m.Executor, plainKV(m)+" "+fmtPct(kvFill(m)), m.BlocksUsed, m.BlocksCached, free,
			m.Running, m.Waiting, m.Swapped)
	}

	pw.section("LATENCY", "MODEL\tTTFT P50/P95\tITL P50/P95\tPREEMPT S/R\tPREFIX\tDONE\tDEGRADE")
	for _, m := range s.Models {
		hit := "-"
		if f, ok := prefixHit(m); ok {
			hit = fmt.Sprintf("%.1f%%", f*100)
		}
		pw.row(m.Model, fmtLatency(m.TTFTP50)+"/"+fmtLatency(m.TTFTP95), fmtLatency(m.ITLP50)+"/"+fmtLatency(m.ITLP95),
			fmt.Sprintf("%d (%d/%d)", m.Preemptions, m.PreemptionsSwap, m.PreemptionsRecompute), hit, m.Completed,
			degradeText(m))
	}

	pw.section("RUNNING/WAITING BY TIER", "MODEL\t"+strings.ToUpper(strings.Join(tiers, "\t")))
	loads := tierLoads(s)
	for _, m := range s.Models {
		cells := []any{m.Model}
		for _, t := range tiers {
			cells = append(cells, fmt.Sprintf("%d/%d", loads[m.Model].running[t], loads[m.Model].waiting[t]))
		}
		pw.row(cells...)
	}

	if len(s.GPUs) > 0 {
		pw.section("GPUS", "GPU\tNAME\tMEMORY GiB\tMEM\tUTIL\tTEMP\tPOWER\tKIND")
		for _, g := range s.GPUs {
			kind := "device"
			if g.Simulated {
				kind = "simulated"
			}
			pw.row(g.Index, g.Name, fmtGiB(g.MemoryUsed)+"/"+fmtGiB(g.MemoryTotal),
				fmtPct(frac(float64(g.MemoryUsed), float64(g.MemoryTotal))), fmtPct(g.Utilization),
				optional(g.TemperatureC, "%.0fC"), optional(g.PowerW, "%.0fW"), kind)
		}
	}

	pw.section("REQUESTS", "ID\tTENANT\tMODEL\tTIER\tSTATE")
	for _, r := range s.Requests {
		pw.row(r.ID, r.Tenant, r.Model, r.Tier, r.State)
	}
	if len(s.Requests) == 0 {
		pw.printf("(none)\n")
	} else {
		// Whether a request is resumable (llmctl top can follow it) is in
		// --json; it does not fit here.
		pw.section("REQUEST PROGRESS", "ID\tIN\tCACHED\tOUT\tTTFT\tTOK/S\tAGE")
		for _, r := range s.Requests {
			pw.row(r.ID, fmtCount(float64(r.PromptTokens)), fmtCount(float64(r.CachedTokens)),
				fmtCount(float64(r.GeneratedTokens)), fmtLatency(r.TTFT), fmtRate(r.TokensPerSecond), fmtAge(r.Age))
		}
	}

	// Burn: used/limit and the share; counts in k and M to fit.
	pw.section("TENANTS", "TENANT\tTIER\tRUN\tRPM\tTPM\tCONC\tDAILY TOKENS\tREJ/1M")
	for _, t := range s.Tenants {
		l, u := t.Limits, t.Usage
		pw.row(t.Tenant, t.Tier, t.Running,
			plainBurn(l.RequestsPerMinute-u.RequestsAvailable, l.RequestsPerMinute),
			plainBurn(l.TokensPerMinute-u.TokensAvailable, l.TokensPerMinute),
			plainBurn(u.InFlight, l.Concurrency),
			plainBurn(u.DailyTokensUsed, l.DailyTokens),
			t.Rejected1)
	}
	if len(s.Tenants) == 0 {
		pw.printf("(none)\n")
	}
	reserved := false
	for _, t := range s.Tenants {
		if t.Reserved != nil && t.Reserved.ReservedTPS > 0 {
			if !reserved {
				pw.section("PROVISIONED THROUGHPUT", "TENANT\tMODEL\tDELIVERED/RESERVED TOK/S\tOF RESERVED")
				reserved = true
			}
			model := t.Reserved.Model
			if model == "" {
				model = "(every model)"
			}
			pw.row(t.Tenant, model, reservedCell(t).Text, fmtPct(t.Reserved.DeliveredTPS/t.Reserved.ReservedTPS))
		}
	}
	if q := s.Quota; q != nil {
		fallback := ""
		if q.FallbackActive {
			fallback = " (Redis failing: local fallback active)"
		}
		pw.printf("\nquota (%s): %d allowed, %d denied%s\n", q.Backend, q.Allow, q.Deny, fallback)
	}
	if len(s.Cluster) > 0 {
		writeMembers(pw, s)
	}
	pw.flush()
	return pw.err
}

// writeMembers writes the CLUSTER section: one row per member, the
// answering node marked "(this)", KV MAX its fullest model's cache use,
// KEYS its cached-prefix keys and UPDATED the age of its last gossiped
// state; then each member's models.
func writeMembers(pw *plainWriter, s *api.Snapshot) {
	pw.section("CLUSTER", "NODE\tSTATUS\tAPI\tRUN\tWAIT\tKV MAX\tKEYS\tUPDATED")
	for _, n := range s.Cluster {
		status, _, _ := memberStatus(n)
		running, waiting, kv := memberLoad(n)
		kvText, updated := fmtPct(kv), "-"
		if len(n.Load) == 0 {
			kvText = "-"
		}
		if age := memberAge(s, n); age >= 0 {
			updated = fmtAge(age) + " ago"
		}
		pw.row(memberName(n), status, orDash(n.APIAddr), running, waiting, kvText, fmtCount(float64(n.PrefixKeys)), updated)
	}
	pw.section("CLUSTER MODELS", "NODE\tMODELS")
	for _, n := range s.Cluster {
		pw.row(memberName(n), orDash(strings.Join(n.Models, ",")))
	}
}

// memberName is a member's id, with "(this)" on the answering node.
func memberName(n api.NodeInfo) string {
	if n.Local {
		return n.ID + localMark
	}
	return n.ID
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// plainKV draws the KV cache in ASCII: # used, + cached, . free.
func plainKV(m api.ModelSnapshot) string {
	const width = 10
	free := max(m.BlocksTotal-m.BlocksUsed-m.BlocksCached, 0)
	c := cells(width, float64(m.BlocksUsed), float64(m.BlocksCached), float64(free))
	if m.BlocksTotal == 0 {
		c = []int{0, 0, width}
	}
	return "[" + strings.Repeat("#", c[0]) + strings.Repeat("+", c[1]) + strings.Repeat(".", c[2]) + "]"
}

// plainBurn writes the use of a limit: "54/60 90%", "70.0k/100k 70%", or
// "unlimited".
func plainBurn(used, limit int64) string {
	if limit <= 0 {
		return "unlimited"
	}
	used = max(used, 0)
	return fmt.Sprintf("%s/%s %s", fmtCount(float64(used)), fmtCount(float64(limit)), fmtPct(frac(float64(used), float64(limit))))
}

func optional(v float64, format string) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// plainWriter writes sections of tab-separated rows aligned by a
// tabwriter, keeping the first error.
type plainWriter struct {
	w   io.Writer
	tw  *tabwriter.Writer
	err error
}

func (p *plainWriter) printf(format string, args ...any) {
	if p.tw != nil {
		p.flush()
	}
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

// section starts a new table under title with the tab-separated header.
func (p *plainWriter) section(title, header string) {
	p.printf("\n%s\n", title)
	p.tw = tabwriter.NewWriter(p.w, 0, 8, 2, ' ', 0)
	p.line(header)
}

func (p *plainWriter) row(cells ...any) {
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = fmt.Sprint(c)
	}
	p.line(strings.Join(s, "\t"))
}

func (p *plainWriter) line(s string) {
	if p.err == nil {
		_, p.err = fmt.Fprintln(p.tw, s)
	}
}

func (p *plainWriter) flush() {
	if p.tw != nil && p.err == nil {
		p.err = p.tw.Flush()
	}
	p.tw = nil
}
