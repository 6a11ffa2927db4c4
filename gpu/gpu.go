// Package gpu reads GPU telemetry through NVML (github.com/NVIDIA/go-nvml):
// device names, memory, utilisation, temperature and power. Every NVML call
// is gated on a successful nvml.Init, since calling NVML after a failed
// Init can kill the process; without a driver there is simply no
// telemetry.
package gpu

import (
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/llmd/llmd/api"
)

// Telemetry reads the node's GPUs. The zero value is ready; Close releases
// NVML.
//
// Locking: mu serialises NVML use and guards the fields.
type Telemetry struct {
	mu     sync.Mutex
	tried  bool
	ok     bool
	closed bool
	// init is nvml.Init; tests replace it.
	init func() nvml.Return
}

// Devices returns one entry per GPU NVML reports, or nil when NVML is not
// available (no driver, no library, no device). NVML is initialised on the
// first call only.
func (t *Telemetry) Devices() []api.GPUInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	if !t.tried {
		t.tried = true
		init := t.init
		if init == nil {
			init = nvml.Init
		}
		t.ok = init() == nvml.SUCCESS
	}
	if !t.ok {
		return nil
	}
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil
	}
	out := make([]api.GPUInfo, 0, n)
	for i := range n {
		dev, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		g := api.GPUInfo{Index: i}
		if name, ret := dev.GetName(); ret == nvml.SUCCESS {
			g.Name = name
		}
		if mem, ret := dev.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.MemoryUsed, g.MemoryTotal = int64(mem.Used), int64(mem.Total)
		}
		if u, ret := dev.GetUtilizationRates(); ret == nvml.SUCCESS {
			g.Utilization = float64(u.Gpu) / 100
		}
		if c, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
			g.TemperatureC = float64(c)
		}
		if mw, ret := dev.GetPowerUsage(); ret == nvml.SUCCESS {
			g.PowerW = float64(mw) / 1000
		}
		out = append(out, g)
	}
	return out
}

// Close shuts NVML down if it was initialised; Devices returns nil after.
func (t *Telemetry) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ok {
		_ = nvml.Shutdown()
	}
	t.ok, t.closed = false, true
}
