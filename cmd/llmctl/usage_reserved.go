package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/llmd/llmd/api"
)

// writeReservations writes the report's provisioned-throughput section:
// each reservation against the rate delivered now and over the window.
// Nothing when no tenant holds one.
func writeReservations(w io.Writer, r *api.UsageReport) error {
	if len(r.Reservations) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w, "\nProvisioned throughput (output tokens/s):"); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TENANT\tMODEL\tRESERVED\tDELIVERED NOW\tOF RESERVED\tWINDOW MEAN\t")
	for _, res := range r.Reservations {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", res.Tenant, res.Model, formatTPS(res.ReservedTPS),
			formatTPS(res.DeliveredTPS), percentOf(res.DeliveredTPS, res.ReservedTPS), formatTPS(res.MeanTPS))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "DELIVERED NOW is the engine's last 2 s; a tenant with nothing queued uses less than it holds.")
	return err
}

// percentOf writes part/whole as a percentage, "-" for a whole of 0.
func percentOf(part, whole float64) string {
	if whole <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*part/whole)
}
