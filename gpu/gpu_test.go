package gpu

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"
)

// TestNoDriverNoTelemetry: a failed Init means no devices and no further
// NVML call (a call after a failed Init could kill the process).
func TestNoDriverNoTelemetry(t *testing.T) {
	calls := 0
	tm := &Telemetry{init: func() nvml.Return { calls++; return nvml.ERROR_LIBRARY_NOT_FOUND }}
	require.Nil(t, tm.Devices())
	require.Nil(t, tm.Devices())
	require.Equal(t, 1, calls, "Init is tried once")
	tm.Close()
	require.Nil(t, tm.Devices())
}

// TestRealNVML runs against whatever this machine has: on a machine
// without an NVIDIA driver it must return nil, never panic.
func TestRealNVML(t *testing.T) {
	var tm Telemetry
	defer tm.Close()
	devs := tm.Devices()
	t.Logf("%d GPUs: %+v", len(devs), devs)
	for _, d := range devs {
		require.Positive(t, d.MemoryTotal)
		require.NotEmpty(t, d.Name)
	}
}
