// Command benchpeer measures llmd beside llama.cpp on the same machine, in
// the same minutes, on the same model files (make bench-peer), and prints
// one table of both sides and their ratios.
//
// For each benchmark shape it writes a random-weight GGUF with `llmctl
// model init` (kept in a cache directory between runs), then runs, for
// ROUNDS rounds, each measurement on llama.cpp and then on llmd (A, B, A,
// B, ...), and reports the median of each side with its range:
//
//   - the executor alone: llama-bench (-p 512 -n 128) against llmd's
//     executor benchmark (engine/cpu BenchmarkFile: a 512-token prefill,
//     and decode steps of 1 sequence), and llama-batched-bench at 8 and 32
//     parallel sequences against the executor's decode steps of 8 and 32;
//   - the server: llama-server -np 8 against llmd --model FILE, both loaded
//     by `llmctl bench` with the same requests: token-id prompts on
//     /v1/completions (so tokenizers and chat templates do not differ),
//     ignore_eos, 128 output tokens, at 1 and 8 concurrent streams, and a
//     512-token prompt with one output token for the time to first token.
//     Tokens are counted as each server reports them (llama.cpp's timings,
//     llmd's log probabilities), not by text chunks. The 8-stream load's
//     decode rate (8 tokens per median gap between a stream's tokens) is
//     also set beside llmd's executor decoding 8 sequences as that load
//     has them (129 to 256 tokens of context, sampled at temperature 1
//     with log-probabilities): what serving through HTTP costs a step.
//
// Every figure is tokens per second (higher is better) except the time to
// first token, whose ratio is llama.cpp's over llmd's (so above 1 is llmd
// faster everywhere). The machine, the time window and the memory
// bandwidth measured at the start and the end head the table; each shape
// also shows its one-stream roofline (weight bytes per token over the read
// bandwidth).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/llmd/llmd/engine/cpu"
)

// shape is one benchmark file: a model shape in one weight type, and how
// llmd runs it.
type shape struct {
	name string   // e.g. "0.5B/Q4_0"
	args []string // llmctl model init flags
	// file is the shape whose file this one measures ("": its own).
	file string
	// f16MatMul is llmd's --cpu-f16-matmul (executor: its
	// LLMD_BENCH_F16_MATMUL); "": the default.
	f16MatMul string
}

// fileName is the shape whose file sh measures.
func (sh shape) fileName() string {
	if sh.file != "" {
		return sh.file
	}
	return sh.name
}

// shapes are the files measured, in table order. The 0.5B is
// Qwen2.5-0.5B's shape and the 1.5B Qwen2.5-1.5B's (memory-bound like real
// models); "small" is a Llama-3-style model with a 128k vocabulary and an
// untied output.
var shapes = func() []shape {
	half := []string{"--arch", "qwen2", "--dim", "896", "--layers", "24", "--heads", "14", "--kv-heads", "2", "--ffn", "4864", "--vocab", "151936", "--tied"}
	big := []string{"--arch", "qwen2", "--dim", "1536", "--layers", "28", "--heads", "12", "--kv-heads", "2", "--ffn", "8960", "--vocab", "151936", "--tied"}
	small := []string{"--arch", "llama", "--dim", "768", "--layers", "12", "--heads", "12", "--kv-heads", "4", "--ffn", "2048", "--vocab", "128256"}
	var out []shape
	add := func(name string, base []string, types ...string) {
		for _, t := range types {
			out = append(out, shape{name: name + "/" + strings.ToUpper(t), args: append(slices.Clone(base), "--type", t)})
		}
	}
	add("0.5B", half, "q4_0", "q8_0", "f16", "q4_k_m")
	// The same F16 file with llmd's opt-in bfloat16 multiplication
	// (--cpu-f16-matmul bf16; llama.cpp runs as in 0.5B/F16).
	f16 := out[len(out)-2]
	out = append(out, shape{name: f16.name + "-bf16", args: f16.args, file: f16.name, f16MatMul: "bf16"})
	add("small", small, "q4_k_m")
	add("1.5B", big, "q4_k_m", "q8_0")
	// For a quick check of the harness only (-shapes tiny/Q8_0).
	add("tiny", []string{"--arch", "llama", "--dim", "288", "--layers", "6", "--heads", "6", "--kv-heads", "6", "--ffn", "768", "--vocab", "32000"}, "q8_0")
	return out
}()

func main() {
	var (
		bin     = flag.String("llama-bin", os.Getenv("LLAMA_CPP_BIN"), "directory with llama-bench, llama-batched-bench and llama-server ($LLAMA_CPP_BIN)")
		src     = flag.String("llama-src", os.Getenv("LLAMA_CPP_SRC"), "llama.cpp source to build with cmake when -llama-bin is not given ($LLAMA_CPP_SRC)")
		commit  = flag.String("llama-commit", os.Getenv("LLAMA_CPP_COMMIT"), "llama.cpp's commit, for the table's header where its build does not know it (built from a tree without .git) ($LLAMA_CPP_COMMIT)")
		rounds  = flag.Int("rounds", 2, "rounds of A/B per measurement")
		threads = flag.Int("threads", 2, "threads on both sides")
		only    = flag.String("shapes", "", "comma-separated shapes to run (default all: "+shapeNames()+")")
		levels  = flag.String("levels", "executor,server", "what to measure: executor, server or both")
		out     = flag.String("o", "", "also write the markdown table to this file")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, config{bin: *bin, src: *src, commit: *commit, rounds: *rounds, threads: *threads, only: *only, levels: *levels, out: *out}); err != nil {
		fmt.Fprintln(os.Stderr, "bench-peer:", err)
		os.Exit(1)
	}
}

func shapeNames() string {
	names := make([]string, len(shapes))
	for i, s := range shapes {
		names[i] = s.name
	}
	return strings.Join(names, ",")
}

type config struct {
	bin, src       string
	commit         string
	rounds         int
	threads        int
	only, levels   string
	out            string
	cache, workdir string
}

func run(ctx context.Context, cfg config) error {
	if cfg.rounds < 1 || cfg.threads < 1 {
		return fmt.Errorf("-rounds and -threads must be >= 1")
	}
	var selected []shape
	for _, s := range shapes {
		if !strings.HasPrefix(s.name, "tiny/") {
			selected = append(selected, s)
		}
	}
	if cfg.only != "" {
		selected = nil
		for _, n := range strings.Split(cfg.only, ",") {
			i := slices.IndexFunc(shapes, func(s shape) bool { return strings.EqualFold(s.name, strings.TrimSpace(n)) })
			if i < 0 {
				return fmt.Errorf("unknown shape %q (known: %s)", n, shapeNames())
			}
			selected = append(selected, shapes[i])
		}
	}
	doExec, doServer := strings.Contains(cfg.levels, "executor"), strings.Contains(cfg.levels, "server")
	if !doExec && !doServer {
		return fmt.Errorf("-levels %q: want executor, server or both", cfg.levels)
	}
	home, err := os.UserCacheDir()
	if err != nil {
		return err
	}
	cfg.cache = filepath.Join(home, "llmd", "bench-peer")
	if err := os.MkdirAll(cfg.cache, 0o755); err != nil {
		return err
	}
	if cfg.bin == "" {
		if cfg.src == "" {
			return fmt.Errorf("set LLAMA_CPP_BIN to a llama.cpp build's bin directory, or LLAMA_CPP_SRC to its source (built into %s)", cfg.cache)
		}
		if cfg.bin, err = buildLlamaCpp(ctx, cfg.src, filepath.Join(cfg.cache, "llama.cpp-build")); err != nil {
			return err
		}
	}
	for _, tool := range []string{"llama-bench", "llama-batched-bench", "llama-server"} {
		if _, err := os.Stat(filepath.Join(cfg.bin, tool)); err != nil {
			return fmt.Errorf("%s: %w", tool, err)
		}
	}
	if cfg.workdir, err = os.MkdirTemp("", "bench-peer-"); err != nil {
		return err
	}
	defer os.RemoveAll(cfg.workdir)
	if err := buildLlmd(ctx, cfg.workdir); err != nil {
		return err
	}

	t := &table{start: time.Now(), threads: cfg.threads, rounds: cfg.rounds, llamaVersion: llamaVersion(ctx, cfg.bin, cfg.commit)}
	t.machine = machine()
	t.bwStart = bandwidth(cfg.threads)
	logf("machine: %s; memory bandwidth: read %.1f GB/s, copy %.1f GB/s", t.machine, t.bwStart.read, t.bwStart.copy)
	for _, sh := range selected {
		if sh.f16MatMul == "bf16" && !cpu.HasBF16MatMul() {
			logf("%s: skipped, this CPU has no AVX512_BF16 for llmd's --cpu-f16-matmul bf16", sh.name)
			continue
		}
		path, err := writeShape(ctx, cfg, sh)
		if err != nil {
			return err
		}
		res := &shapeResult{shape: sh, weightBytes: weightBytes(path)}
		t.shapes = append(t.shapes, res)
		for round := 1; round <= cfg.rounds; round++ {
			seed := uint64(time.Now().UnixNano()) // fresh prompts: no prefix cache on either side
			if doExec {
				logf("%s round %d: executor, llama.cpp", sh.name, round)
				if err := llamaExecutor(ctx, cfg, path, res); err != nil {
					return err
				}
				logf("%s round %d: executor, llmd", sh.name, round)
				if err := llmdExecutor(ctx, cfg, path, res); err != nil {
					return err
				}
			}
			if doServer {
				logf("%s round %d: server, llama.cpp", sh.name, round)
				if err := serve(ctx, cfg, llamaServer, path, seed, res); err != nil {
					return err
				}
				logf("%s round %d: server, llmd", sh.name, round)
				if err := serve(ctx, cfg, llmdServer, path, seed, res); err != nil {
					return err
				}
			}
		}
	}
	t.end = time.Now()
	t.bwEnd = bandwidth(cfg.threads)
	md := t.markdown()
	fmt.Print(md)
	if cfg.out != "" {
		return os.WriteFile(cfg.out, []byte(md), 0o644)
	}
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
