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
