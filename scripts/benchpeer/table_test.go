package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRatioCell(t *testing.T) {
	// Throughput: llmd over llama.cpp, the range from the worst pairing
	// (llmd's slowest over llama.cpp's fastest) to the best.
	assert.Equal(t, "**2.18x** [1.50-3.00]", ratioCell([]float64{10, 12}, []float64{18, 30}, false))
	// TTFT: llama.cpp's time over llmd's.
	assert.Equal(t, "**0.49x** [0.40-0.60]", ratioCell([]float64{400, 480}, []float64{800, 1000}, true))
	assert.Equal(t, "**1.25x**", ratioCell([]float64{100}, []float64{80}, true))
}

func TestMedianSummary(t *testing.T) {
	assert.InDelta(t, 2.5, median([]float64{4, 1, 3, 2}), 1e-12)
	assert.InDelta(t, 3, median([]float64{5, 1, 3}), 1e-12)
	assert.Equal(t, "529 [520-531]", summary([]float64{531, 520, 529}))
	assert.Equal(t, "-", summary(nil))
	assert.Equal(t, "9.50", summary([]float64{9.5}))
}

func TestMarkdown(t *testing.T) {
	r := &shapeResult{shape: shape{name: "0.5B/Q4_0"}, weightBytes: 300e6}
	r.add(mGen1, sideLlama, 90)
	r.add(mGen1, sideLlmd, 99)
	r.add(mTTFT512, sideLlama, 1000)
	r.add(mTTFT512, sideLlmd, 800)
	r.add(mGen8Served, sideLlmd, 400)
	r.add(mGen8Served, sideLlmd, 440)
	r.add(mSrv8Dec, sideLlmd, 380)
	r.add(mSrv8Dec, sideLlmd, 400)
	r.failed[sideLlama] = 3
	tb := &table{start: time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC), end: time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC),
		machine: "cpu", llamaVersion: "1 (abc)", threads: 2, rounds: 1, bwStart: bandwidths{read: 30, copy: 50}, bwEnd: bandwidths{read: 30, copy: 50}, shapes: []*shapeResult{r}}
	md := tb.markdown()
	require.Contains(t, md, "2026-12-02 07:00 to 08:00 UTC")
	// 30 GB/s over 300 MB per token: a roofline of 100 tok/s, 99% reached.
	require.Contains(t, md, "| 0.5B/Q4_0 (300 MB of weights per token; roofline 100.0 tok/s) | generation 1 seq, tok/s (executor) | 90.0 | 99.0 (99% of roofline) | **1.10x** |")
	require.Contains(t, md, "|  | 512-token prompt, TTFT ms (HTTP) | 1000 | 800 | **1.25x** |")
	require.Contains(t, md, "| | failed requests through HTTP | 3 | 0 | |")
	// HTTP decode over the executor's: 390 / 420, from 380/440 to 400/400.
	require.Contains(t, md, "| | llmd's 8-stream decode through HTTP over its executor's as served (goal: 0.9x or more) | | 390 [380-400] over 420 [400-440] | **0.93x** [0.86-1.00] |")
	require.False(t, strings.Contains(md, mGen8Served), "the executor's served figure has no row of its own")
	require.False(t, strings.Contains(md, mSrv8), "measures without samples are left out")
}

func TestBandwidth(t *testing.T) {
	if testing.Short() {
		t.Skip("measures for two seconds")
	}
	bw := bandwidth(1)
	assert.Positive(t, bw.read)
	assert.Positive(t, bw.copy)
}

func TestVersionLine(t *testing.T) {
	out := "version: 0.2.0-dev (build 0, commit unknown)\nbuilt with GNU 12.2.0 for Linux x86_64\n"
	assert.Equal(t, "0.2.0-dev (build 0, commit unknown)", versionLine(out, ""))
	assert.Equal(t, "0.2.0-dev (build 0, commit 3f545bec as given)", versionLine(out, "3f545bec"))
	// A build that knows its commit keeps it; another given one is added.
	assert.Equal(t, "7100 (3f545bec)", versionLine("version: 7100 (3f545bec)\n", "3f545bec"))
	assert.Equal(t, "7100 (3f545bec), given as abc", versionLine("version: 7100 (3f545bec)\n", "abc"))
	assert.Equal(t, "unknown version", versionLine("", ""))
}

func TestBenchLines(t *testing.T) {
	// BenchmarkFile's lines, with the pool's metrics around tokens/s.
	gen := "BenchmarkFile/file=0_5B-Q4_0.gguf/gen/seqs=8-2   20  13054781 ns/op  0.1500 caller-parks/step  170.0 runs/step  612.8 tokens/s  0.1500 worker-parks/step"
	served := "BenchmarkFile/file=0_5B-Q4_0.gguf/gen-served/seqs=8-2   20  14383739 ns/op  0.1000 caller-parks/step  170.0 runs/step  556.2 tokens/s  0.4500 worker-parks/step"
	m := benchGen.FindStringSubmatch(gen)
	require.NotNil(t, m)
	assert.Equal(t, []string{"8", "612.8"}, m[1:])
	assert.Nil(t, benchGen.FindStringSubmatch(served), "gen-served is not a gen/seqs=N line")
	m = benchServed.FindStringSubmatch(served)
	require.NotNil(t, m)
	assert.Equal(t, "556.2", m[1])
	m = benchPrompt.FindStringSubmatch("BenchmarkFile/file=x.gguf/prompt=512-2   5  600449115 ns/op  852.7 tokens/s")
	require.NotNil(t, m)
	assert.Equal(t, "852.7", m[1])
}
