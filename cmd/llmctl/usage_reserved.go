package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/llmd/llmd/api"
)

// writeReservations writes the report's provisioned-throughput section:
// each reservation against the rate delivered now and over the window.
// Nothing when no tenant holds one.
func writeReservations(w io.Writer, r *api.UsageReport) error {
	return writeReservationTable(w, r.Reservations, nil,
		"DELIVERED NOW is the engine's last 2 s; a tenant with nothing queued uses less than it holds.")
}

// writeClusterReservations writes the provisioned-throughput section of a
// merged report, with the number of nodes that report each reservation
// (from answered, the reports merged).
func writeClusterReservations(w io.Writer, merged []api.ReservationUsage, answered []nodeUsage) error {
	nodes := make([]int, len(merged))
	for i, res := range merged {
		for _, a := range answered {
			if slices.ContainsFunc(a.report.Reservations, func(x api.ReservationUsage) bool {
				return x.Tenant == res.Tenant && x.Model == res.Model
			}) {
				nodes[i]++
			}
		}
	}
	return writeReservationTable(w, merged, nodes, "DELIVERED NOW is summed over the nodes' engines (each its last 2 s); "+
		"each engine holds the reservation on its own.")
}

// writeReservationTable writes reservations with a NODES column when nodes
// is not nil, then footer.
func writeReservationTable(w io.Writer, res []api.ReservationUsage, nodes []int, footer string) error {
	if len(res) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w, "\nProvisioned throughput (output tokens/s):"); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	header := "TENANT\tMODEL\tRESERVED\tDELIVERED NOW\tOF RESERVED\tWINDOW MEAN\t"
	if nodes != nil {
		header += "NODES\t"
	}
	fmt.Fprintln(tw, header)
	for i, r := range res {
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t", r.Tenant, r.Model, formatTPS(r.ReservedTPS),
			formatTPS(r.DeliveredTPS), percentOf(r.DeliveredTPS, r.ReservedTPS), formatTPS(r.MeanTPS))
		if nodes != nil {
			line += strconv.Itoa(nodes[i]) + "\t"
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, footer)
	return err
}

// mergeReservations merges the nodes' reservation sections, one per tenant
// and model, sorted by them: the delivered rates and the window's output
// tokens are summed, the window mean is recomputed over the merged window
// (windowSec seconds). The reservation is the tenant's setting, the same on
// every node once replicated; when the nodes report different ones (a
// change not yet everywhere) the largest is kept and a note says so.
func mergeReservations(answered []nodeUsage, windowSec float64) (out []api.ReservationUsage, notes []string) {
	type key struct{ tenant, model string }
	merged := map[key]*api.ReservationUsage{}
	seen := map[key][]string{} // "node reserved" per node, to explain a disagreement
	differs := map[key]bool{}
	for _, a := range answered {
		for _, r := range a.report.Reservations {
			k := key{r.Tenant, r.Model}
			m, ok := merged[k]
			if !ok {
				m = &api.ReservationUsage{Tenant: r.Tenant, Model: r.Model, ReservedTPS: r.ReservedTPS}
				merged[k] = m
			}
			if r.ReservedTPS != m.ReservedTPS {
				differs[k] = true
				m.ReservedTPS = max(m.ReservedTPS, r.ReservedTPS)
			}
			m.DeliveredTPS += r.DeliveredTPS
			m.OutputTokens += r.OutputTokens
			seen[k] = append(seen[k], a.node+" "+formatTPS(r.ReservedTPS))
		}
	}
	keys := slices.SortedFunc(maps.Keys(merged), func(a, b key) int {
		return cmp.Or(strings.Compare(a.tenant, b.tenant), strings.Compare(a.model, b.model))
	})
	for _, k := range keys {
		m := merged[k]
		if windowSec > 0 {
			m.MeanTPS = float64(m.OutputTokens) / windowSec
		}
		out = append(out, *m)
		if differs[k] {
			notes = append(notes, fmt.Sprintf("the reservation of tenant %s on %s differs between nodes (%s): the largest is shown",
				k.tenant, k.model, strings.Join(seen[k], ", ")))
		}
	}
	return out, notes
}

// percentOf writes part/whole as a percentage, "-" for a whole of 0.
func percentOf(part, whole float64) string {
	if whole <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*part/whole)
}
