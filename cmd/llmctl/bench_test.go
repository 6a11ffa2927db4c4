package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/daemon"
	"github.com/llmd/llmd/internal/loadgen"
)

// benchDaemon starts an in-process llmd serving sim/small, fast.
func benchDaemon(t *testing.T) string {
	t.Helper()
	cfg := daemon.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Models = []string{"small"}
	cfg.StepTimeScale = 0.05
	cfg.DataDir = t.TempDir()
	cfg.ShutdownTimeout = 5 * time.Second
	base, _ := startDaemon(t, cfg)
	return base
}

// TestBenchDaemon runs "llmctl bench" against a real llmd: 20 requests,
// all complete, and the report's figures are sane, as text and as JSON.
func TestBenchDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts an in-process llmd; make test runs it")
	}
	base := benchDaemon(t)
	args := []string{"--addr", base, "bench", "--model", "sim/small", "--requests", "20", "--concurrency", "4",
		"--input", "uniform:20-60", "--output", "16", "--slo-ttft", "10s", "--slo-itl", "1s"}

	out, errOut, err := runCmd(t, "", append(args, "--json")...)
	require.NoError(t, err, errOut)
	require.Contains(t, errOut, "bench: sim/small at "+base+", 4 concurrent, 20 requests")
	var rep loadgen.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Equal(t, 20, rep.Requests)
	require.Equal(t, 20, rep.Completed)
	require.Zero(t, rep.Failed)
	require.Empty(t, rep.Errors)
	require.Equal(t, "sim/small", rep.Model)
	require.Equal(t, 20, rep.UsageReported, "llmd sends the usage chunk")
	require.Equal(t, loadgen.BasisChunks, rep.TokenBasis, "simulated models report no log probabilities")
	require.Positive(t, rep.TTFT.Mean)
	require.Equal(t, 20, rep.TTFT.N)
	require.Positive(t, rep.E2E.P50)
	require.GreaterOrEqual(t, rep.E2E.P50, rep.TTFT.P50)
	require.Positive(t, rep.ITL.N)
	require.Positive(t, rep.OutputThroughput)
	require.Positive(t, rep.RequestThroughput)
	require.Greater(t, rep.TotalThroughput, rep.OutputThroughput)
	require.LessOrEqual(t, rep.OutputTokens, 20*16)
	// Prompts are 20 to 60 tokens of sim vocabulary plus the template.
	require.GreaterOrEqual(t, rep.InputTokens, 20*20)
	require.LessOrEqual(t, rep.InputTokens, 20*(60+40))
	require.NotNil(t, rep.Goodput)
	require.Equal(t, 20, rep.Good)
	require.NotNil(t, rep.PrefixHitRate, "llmd reports cached tokens")

	out, errOut, err = runCmd(t, "", args...)
	require.NoError(t, err, errOut)
	for _, want := range []string{
		"model               sim/small at " + base,
		"requests            20 sent, 20 completed, 0 cancelled, 0 failed",
		"request throughput", "output throughput", "goodput", "prefix hit rate",
		"TTFT", "TPOT", "ITL", "E2E",
	} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, "errors")
}

// TestBenchDaemonPrefixAndTurns: shared system prompts and second turns
// hit llmd's prefix cache; cancelled requests are not errors.
func TestBenchDaemonPrefixAndTurns(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts an in-process llmd; make test runs it")
	}
	base := benchDaemon(t)
	out, errOut, err := runCmd(t, "", "--addr", base, "bench", "--model", "sim/small", "--requests", "24",
		"--concurrency", "4", "--input", "uniform:20-60", "--output", "8", "--shared-prefix", "1",
		"--system-prompts", "2", "--system-tokens", "200", "--turns", "2", "--cancel-ratio", "0.2", "--json")
	require.NoError(t, err, errOut)
	var rep loadgen.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Equal(t, 24, rep.Requests)
	require.Zero(t, rep.Failed, "%v", rep.FirstErrors)
	require.Equal(t, 24, rep.Completed+rep.Cancelled)
	require.Positive(t, rep.Cancelled)
	require.NotNil(t, rep.PrefixHitRate)
	require.Greater(t, *rep.PrefixHitRate, 0.3, "system prompts and earlier turns are cached")
}

// TestBenchOpenLoopDataset: --rate with a dataset file.
func TestBenchOpenLoopDataset(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts an in-process llmd; make test runs it")
	}
	base := benchDaemon(t)
	ds := filepath.Join(t.TempDir(), "prompts.jsonl")
	require.NoError(t, os.WriteFile(ds, []byte(
		`{"prompt":"Explain the river and the market.","output_tokens":6}
{"conversations":[{"from":"human","value":"Tell me about the village."},{"from":"gpt","value":"The village is old."}]}
`), 0o600))
	out, errOut, err := runCmd(t, "", "--addr", base, "bench", "--model", "sim/small", "--rate", "100",
		"--requests", "10", "--dataset", ds, "--json")
	require.NoError(t, err, errOut)
	var rep loadgen.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Equal(t, "open", rep.Mode)
	require.Equal(t, 10, rep.Completed)
	require.LessOrEqual(t, rep.OutputTokens, 10*6)
}

// keyServer is a fake OpenAI server that answers one token and records
// the API keys it sees.
type keyServer struct {
	mu   sync.Mutex
	keys map[string]int
}

func (k *keyServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	k.keys[r.Header.Get("Authorization")]++
	k.mu.Unlock()
	if r.Header.Get("Authorization") == "Bearer bad" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"message":"invalid API key","type":"invalid_request_error","code":"invalid_api_key"}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}`+"\n\n")
	fmt.Fprint(w, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}`+"\n\n")
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// TestBenchAPIKeys: repeated --api-key spreads conversations over the keys
// (tenants), a single key comes from the environment, and no key is ever
// printed.
func TestBenchAPIKeys(t *testing.T) {
	ks := &keyServer{keys: map[string]int{}}
	srv := httptest.NewServer(ks)
	t.Cleanup(srv.Close)
	out, errOut, err := runCmd(t, "", "--addr", srv.URL, "bench", "--model", "m", "--requests", "40",
		"--concurrency", "2", "--api-key", "sk-alpha", "--api-key", "sk-beta", "--token-basis", "chunks")
	require.NoError(t, err, errOut)
	require.Positive(t, ks.keys["Bearer sk-alpha"])
	require.Positive(t, ks.keys["Bearer sk-beta"])
	require.Equal(t, 40, ks.keys["Bearer sk-alpha"]+ks.keys["Bearer sk-beta"])
	require.NotContains(t, out+errOut, "sk-")
	require.Contains(t, out, "prefix hit rate     - (the server reported no cached tokens)")

	t.Setenv("LLMD_API_KEY", "sk-env")
	_, errOut, err = runCmd(t, "", "--addr", srv.URL, "bench", "--model", "m", "--requests", "3", "--concurrency", "1", "--token-basis", "chunks")
	require.NoError(t, err, errOut)
	require.Equal(t, 3, ks.keys["Bearer sk-env"])

	// Every request refused: the report, then a one-line error and
	// status 1.
	var stdout, stderr bytes.Buffer
	code := execute(t.Context(), []string{"--addr", srv.URL, "bench", "--model", "m", "--requests", "2",
		"--concurrency", "1", "--api-key", "bad"}, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitFailure, code)
	require.Contains(t, stdout.String(), "http_401")
	require.Contains(t, stderr.String(), "llmctl: no request succeeded (http_401: invalid API key); check --addr, --model and --api-key\n")
}

func TestBenchUsageErrors(t *testing.T) {
	ds := filepath.Join(t.TempDir(), "bad.jsonl")
	require.NoError(t, os.WriteFile(ds, []byte("not json\n"), 0o600))
	tests := map[string]struct {
		args    []string
		wantErr string
	}{
		"bad dist":         {args: []string{"--input", "uniform:9-3"}, wantErr: `invalid argument "uniform:9-3" for "--input" flag`},
		"zero dist":        {args: []string{"--output", "0"}, wantErr: `invalid argument "0" for "--output" flag`},
		"negative rate":    {args: []string{"--rate", "-1"}, wantErr: "--rate must be >= 0"},
		"share":            {args: []string{"--shared-prefix", "1.5"}, wantErr: "--shared-prefix must be within 0 and 1"},
		"cancel":           {args: []string{"--cancel-ratio", "-0.1"}, wantErr: "--cancel-ratio must be within 0 and 1"},
		"no limit":         {args: []string{"--requests", "0"}, wantErr: "give --requests or --duration"},
		"no users":         {args: []string{"--concurrency", "0"}, wantErr: "--concurrency must be >= 1 without --rate"},
		"input and data":   {args: []string{"--input", "5", "--dataset", ds}, wantErr: "give --input or --dataset, not both"},
		"bad dataset":      {args: []string{"--dataset", ds}, wantErr: "--dataset: " + ds + ": line 1"},
		"missing dataset":  {args: []string{"--dataset", ds + ".none"}, wantErr: "no such file"},
		"empty key":        {args: []string{"--api-key", ""}, wantErr: "--api-key must not be empty"},
		"args":             {args: []string{"extra"}, wantErr: `unknown command "extra"`},
		"negative timeout": {args: []string{"--timeout", "-1s"}, wantErr: "--timeout must be >= 0"},
		"endpoint":         {args: []string{"--endpoint", "embeddings"}, wantErr: "--endpoint must be chat or completions"},
		"basis":            {args: []string{"--token-basis", "bytes"}, wantErr: "--token-basis must be auto, timings, logprobs or chunks"},
		"ids on chat":      {args: []string{"--prompt-ids", "1-9"}, wantErr: "--prompt-ids needs --endpoint completions"},
		"bad ids":          {args: []string{"--endpoint", "completions", "--prompt-ids", "9-1"}, wantErr: "--prompt-ids must be LO-HI"},
		"ids not numbers":  {args: []string{"--endpoint", "completions", "--prompt-ids", "a-b"}, wantErr: "--prompt-ids must be LO-HI"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"--addr", closedAddr(t), "bench", "--model", "m"}, tc.args...)
			code := execute(t.Context(), args, strings.NewReader(""), &out, &errOut)
			require.Equal(t, exitUsage, code, errOut.String())
			require.Empty(t, out.String())
			lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
			require.Len(t, lines, 2, "one error line and the hint: %q", errOut.String())
			require.Contains(t, lines[0], tc.wantErr)
			require.Equal(t, "Run 'llmctl bench --help' for usage.", lines[1])
		})
	}
}

func TestBenchProgress(t *testing.T) {
	p := loadgen.Progress{Total: 200, Done: 50, Sent: 66, Failed: 2, OutputTokens: 3000, Elapsed: 2 * time.Second}
	require.Equal(t, "50/200 requests, 16 in flight, 1500 tok/s, 2s, 2 failed", progressLine(p))
	assert.InDelta(t, 0.25, progressFraction(p), 1e-9)
	require.Equal(t, "██░░░░░░░░  25%", progressBar(0.25, 10))
	// A duration-bound run: the time decides.
	p = loadgen.Progress{Duration: 10 * time.Second, Elapsed: 5 * time.Second, Sent: 9, Done: 7}
	assert.InDelta(t, 0.5, progressFraction(p), 1e-9)
	require.Equal(t, "7 requests, 2 in flight, 0 tok/s, 5s", progressLine(p))
}

// TestBenchTokenIDsCPU loads a real (random-weight) GGUF model on llmd's
// CPU executor and benches it with token-id prompts on /v1/completions:
// the prompts are exactly --input tokens, and tokens are counted from the
// log probabilities llmd reports, not from text chunks (random weights
// often produce tokens with no text of their own).
func TestBenchTokenIDsCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts an in-process llmd; make test runs it")
	}
	path := filepath.Join(t.TempDir(), "m.gguf")
	_, errOut, err := runCmd(t, "", "model", "init", "m", "-o", path, "--vocab", "2000", "--dim", "64", "--layers", "2",
		"--heads", "4", "--kv-heads", "2", "--ffn", "128", "--type", "q8_0")
	require.NoError(t, err, errOut)
	cfg := daemon.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Models = nil
	cfg.ModelFiles = []string{path}
	cfg.CPUThreads = 1
	cfg.DataDir = t.TempDir()
	cfg.ShutdownTimeout = 5 * time.Second
	base, _ := startDaemon(t, cfg)

	out, errOut, err := runCmd(t, "", "--addr", base, "bench", "-m", "m", "--requests", "4", "--concurrency", "2",
		"--endpoint", "completions", "--prompt-ids", "100-1900", "--input", "40", "--output", "12", "--ignore-eos", "--json")
	require.NoError(t, err, errOut)
	var rep loadgen.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Equal(t, 4, rep.Completed, rep.FirstErrors)
	require.Equal(t, loadgen.BasisLogprobs, rep.TokenBasis)
	require.Equal(t, 4*40, rep.InputTokens, "token-id prompts are exact")
	require.Equal(t, 4*12, rep.OutputTokens)
	require.Equal(t, 4*11, rep.ITL.N, "one gap per token after the first, text or not")
	require.Positive(t, rep.ITL.P50, "each token in a chunk of its own, text or not")
}
