package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmd/llmd/engine/cpu"
	"github.com/llmd/llmd/model/gguf"
)

// Measures of a shape, in table order.
const (
	mPrompt = "prompt 512, tok/s (executor)"
	mGen1   = "generation 1 seq, tok/s (executor)"
	mGen8   = "generation 8 seqs, tok/s (executor)"
	mGen32  = "generation 32 seqs, tok/s (executor)"
	mSrv1   = "1 stream, output tok/s (HTTP)"
	mSrv8   = "8 streams, output tok/s (HTTP)"
	// mSrv8Dec is the 8-stream load's decode rate: 8 tokens per median gap
	// between a stream's tokens (ITL p50), the steps in which a new
	// request prefills aside. Set beside the executor's 8-sequence figure
	// it shows what serving through HTTP costs a step (issue 22, item 4).
	mSrv8Dec = "8 streams, decode tok/s by ITL p50 (HTTP)"
	// mGen8Served is the executor decoding 8 sequences as llmd serves that
	// load (BenchmarkFile's gen-served: 129 to 256 tokens of context,
	// sampled at temperature 1 with log-probabilities): mSrv8Dec's
	// reference. Not a row of its own: llama.cpp has no such figure.
	mGen8Served = "generation 8 seqs as served, tok/s (executor)"
	mTTFT512    = "512-token prompt, TTFT ms (HTTP)"
)

var measures = []string{mPrompt, mGen1, mGen8, mGen32, mSrv1, mSrv8, mSrv8Dec, mTTFT512}

// lowerBetter are the measures whose ratio is llama.cpp's over llmd's.
var lowerBetter = map[string]bool{mTTFT512: true}

// Sides of a comparison.
const (
	sideLlama = 0
	sideLlmd  = 1
)

// shapeResult collects one shape's samples: per measure, per side.
type shapeResult struct {
	shape       shape
	weightBytes int64
	samples     map[string]*[2][]float64
	// failed counts requests that failed through HTTP, per side.
	failed [2]int
}

func (r *shapeResult) add(m string, side int, v float64) {
	if r.samples == nil {
		r.samples = map[string]*[2][]float64{}
	}
	if r.samples[m] == nil {
		r.samples[m] = &[2][]float64{}
	}
	r.samples[m][side] = append(r.samples[m][side], v)
}

// buildLlamaCpp builds llama.cpp's three tools from src into dir with
// cmake, once (an existing build is reused), and returns the bin
// directory.
func buildLlamaCpp(ctx context.Context, src, dir string) (string, error) {
	bin := filepath.Join(dir, "bin")
	if _, err := os.Stat(filepath.Join(bin, "llama-server")); err == nil {
		return bin, nil
	}
	logf("building llama.cpp from %s into %s (about 15 minutes on 2 cores)", src, dir)
	if err := sh(ctx, nil, "cmake", "-S", src, "-B", dir, "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
		"-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_UI=OFF"); err != nil {
		return "", err
	}
	if err := sh(ctx, nil, "cmake", "--build", dir, "-j", strconv.Itoa(runtime.NumCPU()),
		"--target", "llama-bench", "llama-batched-bench", "llama-server"); err != nil {
		return "", err
	}
	return bin, nil
}

// buildLlmd builds llmd, llmctl and the CPU executor's benchmark binary
// into dir.
func buildLlmd(ctx context.Context, dir string) error {
	logf("building llmd, llmctl and the executor benchmark")
	for _, b := range [][]string{
		{"build", "-o", filepath.Join(dir, "llmd"), "./cmd/llmd"},
		{"build", "-o", filepath.Join(dir, "llmctl"), "./cmd/llmctl"},
		{"test", "-c", "-o", filepath.Join(dir, "cpu.test"), "./engine/cpu/"},
	} {
		if err := sh(ctx, nil, goTool(), b...); err != nil {
			return err
		}
	}
	return nil
}

func goTool() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// writeShape writes sh's GGUF into the cache once and returns its path.
func writeShape(ctx context.Context, cfg config, sh shape) (string, error) {
	path := filepath.Join(cfg.cache, strings.NewReplacer("/", "-", ".", "_").Replace(sh.fileName())+".gguf")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	logf("writing %s", path)
	tmp := path + ".tmp"
	args := append([]string{"model", "init", sh.fileName(), "-o", tmp}, sh.args...)
	if err := sh2(ctx, filepath.Join(cfg.workdir, "llmctl"), args...); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
}

// weightBytes is what one token of generation reads of the file's
// weights: every tensor but the token embeddings (of which it reads one
// row), unless the output head is the embeddings (tied).
func weightBytes(path string) int64 {
	f, err := gguf.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	_, untied := f.Tensor("output.weight")
	var n int64
	for _, t := range f.Tensors {
		if t.Name == "token_embd.weight" && untied {
			continue
		}
		n += int64(t.Size)
	}
	return n
}

// llamaExecutor runs llama-bench and llama-batched-bench on path.
func llamaExecutor(ctx context.Context, cfg config, path string, res *shapeResult) error {
	t := strconv.Itoa(cfg.threads)
	out, err := output(ctx, filepath.Join(cfg.bin, "llama-bench"), "-m", path, "-p", "512", "-n", "128", "-t", t, "-r", "2", "-o", "json")
	if err != nil {
		return err
	}
	var rows []struct {
		NPrompt int     `json:"n_prompt"`
		NGen    int     `json:"n_gen"`
		AvgTS   float64 `json:"avg_ts"`
	}
	if err := json.Unmarshal(out, &rows); err != nil {
		return fmt.Errorf("llama-bench output: %w", err)
	}
	for _, r := range rows {
		switch {
		case r.NPrompt == 512 && r.NGen == 0:
			res.add(mPrompt, sideLlama, r.AvgTS)
		case r.NGen == 128 && r.NPrompt == 0:
			res.add(mGen1, sideLlama, r.AvgTS)
		}
	}
	// Generation from a 64-token prompt to 192 tokens of context, as the
	// executor benchmark decodes.
	out, err = output(ctx, filepath.Join(cfg.bin, "llama-batched-bench"), "-m", path, "-c", "8192", "-b", "2048", "-ub", "512",
		"-npp", "64", "-ntg", "128", "-npl", "8,32", "-t", t, "--output-format", "jsonl")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(out), "\n") {
		var r struct {
			PL      int     `json:"pl"`
			SpeedTG float64 `json:"speed_tg"`
		}
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &r) != nil {
			continue
		}
		switch r.PL {
		case 8:
			res.add(mGen8, sideLlama, r.SpeedTG)
		case 32:
			res.add(mGen32, sideLlama, r.SpeedTG)
		}
	}
	return nil
}

var (
	benchPrompt = regexp.MustCompile(`/prompt=512-\d+\s.*?([\d.]+) tokens/s`)
	benchGen    = regexp.MustCompile(`/gen/seqs=(\d+)-\d+\s.*?([\d.]+) tokens/s`)
	benchServed = regexp.MustCompile(`/gen-served/seqs=8-\d+\s.*?([\d.]+) tokens/s`)
)

// llmdExecutor runs the executor benchmark (BenchmarkFile) on path.
func llmdExecutor(ctx context.Context, cfg config, path string, res *shapeResult) error {
	cmd := exec.CommandContext(ctx, filepath.Join(cfg.workdir, "cpu.test"), "-test.run", "^$", "-test.bench", "^BenchmarkFile$",
		"-test.benchtime", "3s", "-test.cpu", strconv.Itoa(cfg.threads))
	cmd.Env = append(os.Environ(), "LLMD_BENCH_GGUF="+path, "LLMD_BENCH_THREADS="+strconv.Itoa(cfg.threads),
		"LLMD_BENCH_F16_MATMUL="+res.shape.f16MatMul)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("executor benchmark: %w\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if m := benchPrompt.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			res.add(mPrompt, sideLlmd, v)
		}
		if m := benchServed.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			res.add(mGen8Served, sideLlmd, v)
		}
		if m := benchGen.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			switch m[1] {
			case "1":
				res.add(mGen1, sideLlmd, v)
			case "8":
				res.add(mGen8, sideLlmd, v)
			case "32":
				res.add(mGen32, sideLlmd, v)
			}
		}
	}
	return nil
}

// A server kind: how to start it on a port.
type serverKind struct {
	side  int
	name  string
	start func(cfg config, sh shape, path string, port int, dir string) *exec.Cmd
}

var (
	llamaServer = serverKind{side: sideLlama, name: "llama-server", start: func(cfg config, _ shape, path string, port int, _ string) *exec.Cmd {
		// 8 slots of 1,024 tokens: room for each workload's prompt and
		// answer.
		return exec.Command(filepath.Join(cfg.bin, "llama-server"), "-m", path, "-np", "8", "-c", "8192",
			"-t", strconv.Itoa(cfg.threads), "--host", "127.0.0.1", "--port", strconv.Itoa(port))
	}}
	llmdServer = serverKind{side: sideLlmd, name: "llmd", start: func(cfg config, sh shape, path string, port int, dir string) *exec.Cmd {
		return exec.Command(filepath.Join(cfg.workdir, "llmd"), "--model", path, "--cpu-threads", strconv.Itoa(cfg.threads),
			"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", dir, "--cpu-f16-matmul", sh.f16MatMul)
	}}
)

// serve starts one server on path, loads it with llmctl bench (a warm-up,
// then 1 stream, 8 streams and the 512-token prompt) and stops it.
func serve(ctx context.Context, cfg config, k serverKind, path string, seed uint64, res *shapeResult) (err error) {
	port, err := freePort()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(cfg.workdir, k.name+"-")
	if err != nil {
		return err
	}
	cmd := k.start(cfg, res.shape, path, port, dir)
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", k.name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if err != nil {
			log, _ := os.ReadFile(logFile.Name())
			err = fmt.Errorf("%w\n%s log (tail):\n%s", err, k.name, tail(string(log), 2000))
		}
	}()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitReady(ctx, base, exited); err != nil {
		return fmt.Errorf("%s: %w", k.name, err)
	}
	load := func(conc, requests, input, output int, s uint64) (*benchReport, error) {
		return bench(ctx, cfg, base, conc, requests, input, output, s)
	}
	// Warm-up: three short requests, of which one must complete. On random
	// weights llama-server fails some requests with a 500 (its output
	// parser rejects a partial UTF-8 character), so one alone would end the
	// whole run on a failure that the measured loads count and go past.
	if _, err := load(1, 3, 32, 8, seed+99); err != nil {
		return err
	}
	one, err := load(1, 4, 128, 128, seed)
	if err != nil {
		return err
	}
	eight, err := load(8, 24, 128, 128, seed+1)
	if err != nil {
		return err
	}
	prefill, err := load(1, 4, 512, 1, seed+2)
	if err != nil {
		return err
	}
	res.add(mSrv1, k.side, one.OutputThroughput)
	res.add(mSrv8, k.side, eight.OutputThroughput)
	if eight.ITL.P50 > 0 {
		res.add(mSrv8Dec, k.side, 8*1000/eight.ITL.P50)
	}
	res.add(mTTFT512, k.side, prefill.TTFT.P50)
	res.failed[k.side] += one.Failed + eight.Failed + prefill.Failed
	return nil
}

// benchReport is what benchpeer reads of llmctl bench --json.
type benchReport struct {
	Completed        int     `json:"completed"`
	Failed           int     `json:"failed"`
	OutputThroughput float64 `json:"output_throughput"`
	TokenBasis       string  `json:"token_basis"`
	TTFT             struct {
		P50 float64 `json:"p50_ms"`
	} `json:"ttft"`
	ITL struct {
		P50 float64 `json:"p50_ms"`
	} `json:"itl"`
	FirstErrors map[string]string `json:"first_errors"`
}

func bench(ctx context.Context, cfg config, base string, conc, requests, input, output int, seed uint64) (*benchReport, error) {
	out, err := output2(ctx, filepath.Join(cfg.workdir, "llmctl"), "--addr", base, "bench",
		"--endpoint", "completions", "--prompt-ids", "1000-30000", "--ignore-eos",
		"--concurrency", strconv.Itoa(conc), "--requests", strconv.Itoa(requests),
		"--input", strconv.Itoa(input), "--output", strconv.Itoa(output),
		"--seed", strconv.FormatUint(seed, 10), "--timeout", "10m", "--json")
	var rep benchReport
	if jerr := json.Unmarshal(out, &rep); jerr != nil {
		return nil, fmt.Errorf("llmctl bench: %v %v", err, jerr)
	}
	if rep.Completed == 0 {
		return nil, fmt.Errorf("llmctl bench at %s: no request completed (%v)", base, err)
	}
	for kind, msg := range rep.FirstErrors {
		logf("warning: %s: requests failed: %s: %s", base, kind, msg)
	}
	if rep.TokenBasis == "chunks" {
		logf("warning: %s reported no tokens; timings are by text chunks", base)
	}
	return &rep, nil
}

// waitReady waits until base answers /health (llama.cpp) or /healthz
// (llmd) with 200, the process exits, or two minutes pass.
func waitReady(ctx context.Context, base string, exited <-chan struct{}) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		for _, p := range []string{"/health", "/healthz"} {
			resp, err := http.Get(base + p)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
			}
		}
		select {
		case <-exited:
			return errors.New("exited before it was ready")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return errors.New("not ready after 2 minutes")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// bandwidths are the memory bandwidth figures of the machine, in GB/s,
// with the run's threads.
type bandwidths struct {
	// read is the rate of a read-only stream with the executor's vector
	// kernels (cpu.ReadBandwidth): the bound of a decode, which only reads
	// the weights.
	read float64
	// copy counts the bytes read plus the bytes written by copying.
	copy float64
}

// bandwidth measures both figures with threads goroutines, over about a
// second each.
func bandwidth(threads int) bandwidths {
	const size = 128 << 20
	bufs := make([][]uint64, threads)
	dsts := make([][]uint64, threads)
	for i := range bufs {
		bufs[i], dsts[i] = make([]uint64, size/8), make([]uint64, size/8)
		for j := range bufs[i] {
			bufs[i][j] = uint64(j)
		}
		copy(dsts[i], bufs[i]) // fault the pages in
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0.0
	for i := range threads {
		wg.Go(func() {
			start := time.Now()
			n := 0
			for time.Since(start) < time.Second {
				copy(dsts[i], bufs[i])
				n++
			}
			mu.Lock()
			total += float64(2*size*n) / time.Since(start).Seconds()
			mu.Unlock()
		})
	}
	wg.Wait()
	return bandwidths{read: cpu.ReadBandwidth(threads, time.Second), copy: total / 1e9}
}

// machine describes the CPU.
func machine() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	model := runtime.GOARCH
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			model = strings.TrimSpace(v)
			break
		}
	}
	return fmt.Sprintf("%s, %d CPUs", model, runtime.NumCPU())
}

// llamaVersion is llama.cpp's build, as llama-server --version says.
func llamaVersion(ctx context.Context, bin, commit string) string {
	out, _ := exec.CommandContext(ctx, filepath.Join(bin, "llama-server"), "--version").CombinedOutput()
	return versionLine(string(out), commit)
}

// versionLine picks the version from llama-server --version's output. A
// build from a tree without .git knows no commit ("commit unknown"); the
// commit the user names stands in for it, marked as given.
func versionLine(out, commit string) string {
	v := "unknown version"
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "version:") {
			v = strings.TrimSpace(strings.TrimPrefix(line, "version:"))
			break
		}
	}
	if commit != "" && !strings.Contains(v, commit) {
		if strings.Contains(v, "unknown") {
			v = strings.Replace(v, "unknown", commit+" as given", 1)
		} else {
			v += ", given as " + commit
		}
	}
	return v
}

// sh runs a command with its output on stderr.
func sh(ctx context.Context, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

func sh2(ctx context.Context, name string, args ...string) error { return sh(ctx, nil, name, args...) }

// output runs a command and returns its stdout (stderr discarded: the
// llama.cpp tools log there).
func output(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		return out, fmt.Errorf("%s: %w", filepath.Base(name), err)
	}
	return out, nil
}

// output2 is output that keeps stdout when the command fails (llmctl
// bench prints its report, then exits non-zero when requests failed).
func output2(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var errBuf strings.Builder
	cmd.Stderr = &errBuf
	out, err := cmd.Output()
	if err != nil {
		err = fmt.Errorf("%w: %s", err, tail(errBuf.String(), 500))
	}
	return out, err
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
