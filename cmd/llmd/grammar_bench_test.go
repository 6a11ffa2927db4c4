package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/internal/cpushapes"
	"github.com/llmd/llmd/internal/loadgen"
	"github.com/llmd/llmd/internal/workload"
	"github.com/llmd/llmd/model/gguf"
)

// grammarBenchSchema mixes structure, numbers, enums and strings, and
// needs far more than the answer's length to complete (at least 50 items),
// so both arms of the comparison generate exactly grammarBenchOutput
// tokens (ignore_eos).
const grammarBenchSchema = `{"type": "object", "properties": {"notes": {"type": "array", "minItems": 50, "items": {
	"type": "object", "properties": {"id": {"type": "integer"}, "tag": {"enum": ["todo", "done", "blocked"]},
	"text": {"type": "string", "maxLength": 40}}, "required": ["id", "tag", "text"]}}}, "required": ["notes"]}`

const grammarBenchOutput = 128

// TestGrammarDecodeFigures measures issue 19's goal: the decode tokens/s
// of the 0.5B shape (Q8_0, 151,936-token vocabulary) at 1 and 8 streams,
// with and without a JSON schema on every request, through the HTTP API on
// one real llmd process. The two arms alternate within each run (so the
// VM's drift hits both), each run's ratio is schema/plain, and the table
// gives the median and range over LLMD_CPU_SERVE_RUNS runs (3). It runs
// only with LLMD_GRAMMAR_BENCH=1; about ten minutes on two cores.
func TestGrammarDecodeFigures(t *testing.T) {
	if os.Getenv("LLMD_GRAMMAR_BENCH") == "" {
		t.Skip("set LLMD_GRAMMAR_BENCH=1 to measure the cost of a grammar on decode throughput")
	}
	bin, ctl := buildLLMD(t), buildLLMCTL(t)
	sh := cpushapes.Shapes[2]
	require.Equal(t, "0.5B", sh.Name)
	m := sh.Model
	m.Type, m.Seed = gguf.TypeQ8_0, 1
	path := writeRandomModel(t, ctl, "grammar-0.5b", m)
	kvMiB := max(256, int(math.Ceil(float64(2*8*384*kvBytesPerToken(m))/(1<<20))))
	p := startLLMD(t, bin, "--model", path, "--data-dir", t.TempDir(), "--kv-cache-mib", strconv.Itoa(kvMiB))
	modelID := strings.TrimSuffix(filepath.Base(path), ".gguf")

	rf := &api.ResponseFormat{Type: "json_schema", JSONSchema: &api.JSONSchemaSpec{Name: "notes",
		Schema: json.RawMessage(grammarBenchSchema)}}
	level := func(streams int, format *api.ResponseFormat, seed uint64) float64 {
		n := max(2*streams, 3)
		temp := 1.0
		r, err := loadgen.New(loadgen.Config{BaseURL: p.base, Model: modelID, Temperature: &temp, Timeout: 10 * time.Minute,
			IgnoreEOS: true, ResponseFormat: format},
			workload.Spec{Requests: n, Concurrency: streams, Input: workload.Fixed(cpuServeInput),
				Output: workload.Fixed(grammarBenchOutput), Turns: workload.Fixed(1), Seed: seed})
		require.NoError(t, err)
		start := time.Now()
		rep, err := r.Run(t.Context())
		wall := time.Since(start)
		require.NoError(t, err)
		require.Zero(t, rep.Failed, "failed requests %v, first errors %v", rep.Errors, rep.FirstErrors)
		require.Equal(t, n*grammarBenchOutput, rep.OutputTokens, "every answer runs to max_tokens")
		return float64(rep.OutputTokens) / wall.Seconds()
	}
	level(1, rf, 1) // warm up, and fill the grammar's caches
	level(1, nil, 1)

	type arm struct{ plain, schema, ratio []float64 }
	arms := map[int]*arm{1: {}, 8: {}}
	for run := range cpuServeRuns(t) {
		for _, streams := range []int{1, 8} {
			a := arms[streams]
			seed := uint64(10 + run)
			var plain, schema float64
			if run%2 == 0 {
				plain, schema = level(streams, nil, seed), level(streams, rf, seed)
			} else {
				schema, plain = level(streams, rf, seed), level(streams, nil, seed)
			}
			a.plain, a.schema, a.ratio = append(a.plain, plain), append(a.schema, schema), append(a.ratio, schema/plain)
			t.Logf("run %d, %d streams: plain %.1f tok/s, schema %.1f tok/s, ratio %.3f", run, streams, plain, schema, schema/plain)
		}
	}
	var b strings.Builder
	b.WriteString("| streams | plain tok/s | with schema tok/s | schema / plain |\n|---:|---:|---:|---:|\n")
	for _, streams := range []int{1, 8} {
		a := arms[streams]
		fmt.Fprintf(&b, "| %d | %s | %s | %.3f (%.3f-%.3f) |\n", streams, tokPerSecRange(a.plain), tokPerSecRange(a.schema),
			median(a.ratio), slices.Min(a.ratio), slices.Max(a.ratio))
	}
	t.Logf("\n%s", b.String())
}
