package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

func TestWriteReservations(t *testing.T) {
	var b strings.Builder
	require.NoError(t, writeReservations(&b, &api.UsageReport{}))
	require.Empty(t, b.String(), "no reservation, no section")

	require.NoError(t, writeReservations(&b, &api.UsageReport{Reservations: []api.ReservationUsage{
		{Tenant: "acme", Model: "sim/small", ReservedTPS: 400, DeliveredTPS: 412.4, OutputTokens: 1_000_000, MeanTPS: 11.57},
		{Tenant: "globex", Model: "sim/mid", ReservedTPS: 50},
	}}))
	require.Equal(t, ""+
		"\nProvisioned throughput (output tokens/s):\n"+
		"  TENANT      MODEL  RESERVED  DELIVERED NOW  OF RESERVED  WINDOW MEAN\n"+
		"    acme  sim/small       400          412.4         103%         11.6\n"+
		"  globex    sim/mid        50              0           0%            0\n"+
		"DELIVERED NOW is the engine's last 2 s; a tenant with nothing queued uses less than it holds.\n", b.String())
}

func TestMergeReservations(t *testing.T) {
	a := &api.UsageReport{Reservations: []api.ReservationUsage{
		{Tenant: "globex", Model: "sim/mid", ReservedTPS: 50, DeliveredTPS: 20, OutputTokens: 3_600, MeanTPS: 1},
		{Tenant: "acme", Model: "sim/small", ReservedTPS: 400, DeliveredTPS: 250, OutputTokens: 36_000, MeanTPS: 10},
	}}
	b := &api.UsageReport{Reservations: []api.ReservationUsage{
		{Tenant: "acme", Model: "sim/small", ReservedTPS: 400, DeliveredTPS: 180.5, OutputTokens: 7_200, MeanTPS: 2},
	}}
	got, notes := mergeReservations([]nodeUsage{{node: "a", report: a}, {node: "b", report: b}}, 3600)
	require.Empty(t, notes)
	require.Equal(t, []api.ReservationUsage{
		{Tenant: "acme", Model: "sim/small", ReservedTPS: 400, DeliveredTPS: 430.5, OutputTokens: 43_200, MeanTPS: 12},
		{Tenant: "globex", Model: "sim/mid", ReservedTPS: 50, DeliveredTPS: 20, OutputTokens: 3_600, MeanTPS: 1},
	}, got, "summed over the nodes, sorted, the mean over the merged window")

	b.Reservations[0].ReservedTPS = 300
	got, notes = mergeReservations([]nodeUsage{{node: "a", report: a}, {node: "b", report: b}}, 3600)
	require.Equal(t, 400.0, got[0].ReservedTPS, "the largest")
	require.Equal(t, []string{"the reservation of tenant acme on sim/small differs between nodes (a 400, b 300): the largest is shown"},
		notes)

	got, notes = mergeReservations([]nodeUsage{{node: "a", report: &api.UsageReport{}}}, 3600)
	require.Empty(t, got)
	require.Empty(t, notes)
}
