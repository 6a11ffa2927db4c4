package sim

import (
	"fmt"
	"strings"
)

// GPU is a GPU profile: the figures of one accelerator that the roofline
// model needs. Figures are from the public datasheets, dense (without
// structured sparsity).
type GPU struct {
	// Name is the display name, e.g. "H100 SXM 80GB".
	Name string
	// MemoryBytes is the device memory in bytes, as the driver reports it
	// (nvidia-smi's total; e.g. 81,559 MiB for an H100 80GB).
	MemoryBytes int64
	// BandwidthBytesPerSec is the peak memory bandwidth in bytes/s.
	BandwidthBytesPerSec float64
	// BF16FLOPS is the peak dense BF16/FP16 tensor throughput in FLOP/s.
	BF16FLOPS float64
	// FP8FLOPS is the peak dense FP8 tensor throughput in FLOP/s; 0 when
	// the GPU has no FP8 tensor cores (FP8 weights then run at BF16FLOPS).
	FP8FLOPS float64
	// HostLinkBytesPerSec is the effective host-to-device bandwidth in
	// bytes/s, one direction (PCIe), used for KV swap.
	HostLinkBytesPerSec float64
}

// PeakFLOPS returns the peak dense FLOP/s for matrix multiplies whose
// weights take dtypeBytes bytes per value: the FP8 rate for 1 byte where
// the GPU has one, the BF16 rate otherwise.
func (g GPU) PeakFLOPS(dtypeBytes int) float64 {
	if dtypeBytes == 1 && g.FP8FLOPS > 0 {
		return g.FP8FLOPS
	}
	return g.BF16FLOPS
}

const (
	mib = 1 << 20
	gib = 1 << 30

	tera = 1e12
	giga = 1e9

	// pcie5 and pcie4 are the effective one-way bandwidths of a x16 link
	// (64 and 32 GB/s raw).
	pcie5 = 50 * giga
	pcie4 = 25 * giga
)

// gpus are the built-in profiles by lookup name, in gpuNames order.
var gpus = map[string]GPU{
	// H100 SXM5 80GB: HBM3 3.35 TB/s; BF16 989 TFLOPS and FP8 1,979
	// TFLOPS dense (1,979 and 3,958 with sparsity); PCIe Gen5.
	"h100": {
		Name:                 "H100 SXM 80GB",
		MemoryBytes:          81559 * mib,
		BandwidthBytesPerSec: 3.35 * tera,
		BF16FLOPS:            989 * tera,
		FP8FLOPS:             1979 * tera,
		HostLinkBytesPerSec:  pcie5,
	},
	// H200 SXM 141GB: HBM3e 4.8 TB/s; the same tensor cores as the H100.
	"h200": {
		Name:                 "H200 SXM 141GB",
		MemoryBytes:          143771 * mib,
		BandwidthBytesPerSec: 4.8 * tera,
		BF16FLOPS:            989 * tera,
		FP8FLOPS:             1979 * tera,
		HostLinkBytesPerSec:  pcie5,
	},
	// A100 SXM4 80GB: HBM2e 2,039 GB/s; BF16 312 TFLOPS dense; no FP8;
	// PCIe Gen4.
	"a100": {
		Name:                 "A100 SXM 80GB",
		MemoryBytes:          81920 * mib,
		BandwidthBytesPerSec: 2.039 * tera,
		BF16FLOPS:            312 * tera,
		HostLinkBytesPerSec:  pcie4,
	},
	// L40S 48GB: GDDR6 (ECC on) 864 GB/s; BF16 362 TFLOPS and FP8 733
	// TFLOPS dense per the datasheet (733 and 1,466 with sparsity); PCIe
	// Gen4.
	"l40s": {
		Name:                 "L40S 48GB",
		MemoryBytes:          46068 * mib,
		BandwidthBytesPerSec: 864 * giga,
		BF16FLOPS:            362.05 * tera,
		FP8FLOPS:             733 * tera,
		HostLinkBytesPerSec:  pcie4,
	},
}

var gpuNames = []string{"h100", "h200", "a100", "l40s"}

// GPUNames returns the lookup names of the built-in GPU profiles. The
// caller owns the returned slice.
func GPUNames() []string {
	return append([]string(nil), gpuNames...)
}

// GPUByName returns the built-in GPU profile named name ("h100", "h200",
// "a100" or "l40s", case-insensitive; the display name is accepted too).
func GPUByName(name string) (GPU, error) {
	key := strings.ToLower(strings.TrimSpace(name))
	if g, ok := gpus[key]; ok {
		return g, nil
	}
	for _, g := range gpus {
		if strings.EqualFold(g.Name, key) {
			return g, nil
		}
	}
	return GPU{}, fmt.Errorf("sim: unknown GPU %q (known: %s)", name, strings.Join(gpuNames, ", "))
}
