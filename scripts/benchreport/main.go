// Command benchreport runs llmd's benchmark suite and rewrites the
// generated sections of BENCHMARKS.md with the results and a description
// of the machine (make bench).
//
// Each group of benchmarks runs as one `go test -bench` (with -benchmem and
// -count N; each figure is the median of the N runs) or, for the
// measurements that are tests (CPU serving, streams held, cluster routing),
// one `go test -run` that writes its own table. The results replace the
// content between `<!-- generated: NAME -->` and `<!-- end generated: NAME -->`
// in the file; everything outside the markers stays as it is. A failing
// benchmark or test stops the run with an error and leaves the file
// untouched; the file is written whole (a temporary file renamed over it).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// group is one generated section: a benchmark run or a test that writes a
// table.
type group struct {
	// name is the section's marker name.
	name string
	// heading, if set, starts the section's content (for sections that
	// have no hand-written heading around them).
	heading string
	// pkgs are the packages to run.
	pkgs []string
	// bench is the -bench pattern; empty for a table test.
	bench string
	// args are extra go test flags (-benchtime, -cpu).
	args []string
	// test is the test to run (-run) for a table group; it writes its
	// markdown table to the file named by the environment variable out.
	test, out string
	// env is extra environment for the run; timeout its -timeout.
	env     []string
	timeout string
	// note is a line written under the table.
	note string
}

// groups returns the suite, in BENCHMARKS.md's order. streams is the most
// concurrent streams to hold.
func groups(streams int) []group {
	return []group{
		{name: "scheduler", pkgs: []string{"./engine/"}, bench: "SchedulerStep"},
		{name: "kvpool", pkgs: []string{"./engine/", "./engine/kvcache/"}, bench: "PoolAllocateRelease|PrefixLookup|CachedPrefix"},
		{name: "sampling", heading: "## Sampling\n", pkgs: []string{"./engine/sample/"}, bench: "."},
		{name: "sim", pkgs: []string{"./engine/sim/"}, bench: "Forward|SharedSystemPrompt"},
		{name: "quota", pkgs: []string{"./quota/", "./store/"}, bench: "ReserveReconcile|Authenticate", args: []string{"-cpu", "1,2"}},
		{name: "usage", pkgs: []string{"./store/"}, bench: "UsageWriter", args: []string{"-benchtime", "20000x"}},
		{name: "tokenizer", pkgs: []string{"./model/gguf/", "./model/tokenizer/"}, bench: "Tokenizer|QuantDequantize"},
		{name: "cpu", pkgs: []string{"./engine/cpu/"}, bench: "Shapes/model=(tiny|small)/", args: []string{"-benchtime", "2s"},
			note: "The 0.5B shape is left out of `make bench` (about 5 minutes a run); measure it with the command of this section."},
		{name: "cpu-kernels", pkgs: []string{"./engine/cpu/"}, bench: "MatMul/type=(f16|q8_0|q4_0)/rows=2048/|MemoryRead"},
		{name: "cpu-serving", heading: "## CPU executor through the HTTP API (issue 5)\n",
			pkgs: []string{"./cmd/llmd/"}, test: "TestCPUServingFigures", out: "LLMD_CPU_SERVE_BENCH_OUT", timeout: "60m",
			env: []string{"LLMD_CPU_SERVE_BENCH=1"}},
		{name: "streams", heading: "## Concurrent SSE streams (issue 11: goal 50,000 streams with inter-token p99 under 2x the idle figure)\n",
			pkgs: []string{"./daemon/"}, test: "TestStreamsHeld", out: "LLMD_STREAMS_OUT", timeout: "60m",
			env: []string{"LLMD_STREAMS=" + strconv.Itoa(streams)}},
		{name: "cluster", pkgs: []string{"./cmd/llmd/"}, test: "TestClusterRoutingFigures", out: "LLMD_CLUSTER_BENCH_OUT",
			timeout: "20m", env: []string{"LLMD_CLUSTER_BENCH=1"}},
		{name: "cluster-sim", pkgs: []string{"./internal/fleet/"}, test: "TestRoutingFigures", out: "LLMD_ROUTE_SIM_OUT",
			timeout: "20m", env: []string{"LLMD_ROUTE_SIM=1"}},
	}
}

func main() {
	file := flag.String("file", "BENCHMARKS.md", "the file whose generated sections are rewritten")
	count := flag.Int("count", 3, "runs of each benchmark (-count); the tables show the median")
	streams := flag.Int("streams", 10000, "the most concurrent SSE streams to hold (the streams section); 0 skips it")
	skip := flag.String("skip", "", "comma-separated sections not to run (their content stays)")
	only := flag.String("only", "", "comma-separated sections to run, and no others")
	dryRun := flag.Bool("n", false, "print the new file instead of writing it")
	raw := flag.String("raw", "", "also write every go test output to this file (for benchstat)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, options{file: *file, count: *count, streams: *streams, skip: splitList(*skip),
		only: splitList(*only), dryRun: *dryRun, raw: *raw}); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

type options struct {
	file       string
	count      int
	streams    int
	skip, only []string
	dryRun     bool
	raw        string
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func run(ctx context.Context, o options) error {
	if o.count < 1 {
		return fmt.Errorf("-count %d: want at least 1", o.count)
	}
	doc, err := os.ReadFile(o.file)
	if err != nil {
		return err
	}
	all := groups(o.streams)
	var todo []group
	for _, g := range all {
		if slices.Contains(o.skip, g.name) || len(o.only) > 0 && !slices.Contains(o.only, g.name) ||
			g.name == "streams" && o.streams <= 0 {
			continue
		}
		todo = append(todo, g)
	}
	for _, name := range append(slices.Clone(o.skip), o.only...) {
		if !slices.ContainsFunc(all, func(g group) bool { return g.name == name }) {
			return fmt.Errorf("no section %q (sections: %s)", name, groupNames(all))
		}
	}
	// Check the markers before spending minutes on the benchmarks.
	check := map[string]string{"machine": ""}
	for _, g := range todo {
		check[g.name] = ""
	}
	if _, err := replaceSections(doc, check); err != nil {
		return fmt.Errorf("%s: %w", o.file, err)
	}

	var rawOut io.Writer = io.Discard
	if o.raw != "" {
		f, err := os.Create(o.raw)
		if err != nil {
			return err
		}
		defer f.Close()
		rawOut = f
	}
	m := describeMachine(ctx)
	began := time.Now()
	cpu0 := machineCPU()
	sections := map[string]string{}
	var timings []string
	for _, g := range todo {
		start := time.Now()
		content, cpu, err := runGroup(ctx, g, o.count, rawOut)
		if m.cpuID == "" {
			m.cpuID = cpu
		}
		if err != nil {
			return fmt.Errorf("section %s: %w (%s left unchanged)", g.name, err, o.file)
		}
		sections[g.name] = content
		timings = append(timings, fmt.Sprintf("%s %v", g.name, time.Since(start).Round(time.Second)))
	}
	m.took = time.Since(began)
	m.busy = machineCPU().busyShare(cpu0)
	m.own = ownCPU()
	m.loadEnd = loadAvg()
	m.count = o.count
	sections["machine"] = m.String()

	out, err := replaceSections(doc, sections)
	if err != nil {
		return fmt.Errorf("%s: %w", o.file, err)
	}
	fmt.Fprintf(os.Stderr, "benchreport: %s in %v (%s)\n", groupNames(todo), m.took.Round(time.Second), strings.Join(timings, ", "))
	if o.dryRun {
		_, err := os.Stdout.Write(out)
		return err
	}
	return writeFileAtomic(o.file, out)
}

func groupNames(gs []group) string {
	names := make([]string, len(gs))
	for i, g := range gs {
		names[i] = g.name
	}
	return strings.Join(names, ", ")
}

// runGroup runs one group and returns its section's content and the CPU
// go test names (its "cpu:" line), if any.
func runGroup(ctx context.Context, g group, count int, rawOut io.Writer) (content, cpu string, err error) {
	content, out, err := runGroupOutput(ctx, g, count, rawOut)
	for line := range strings.SplitSeq(out, "\n") {
		if v, ok := strings.CutPrefix(line, "cpu: "); ok {
			cpu = strings.Join(strings.Fields(v), " ")
			break
		}
	}
	return content, cpu, err
}

func runGroupOutput(ctx context.Context, g group, count int, rawOut io.Writer) (content, out string, err error) {
	args := []string{"test"}
	var tableFile string
	if g.test != "" {
		f, err := os.CreateTemp("", "benchreport-"+g.name+"-*.md")
		if err != nil {
			return "", "", err
		}
		tableFile = f.Name()
		f.Close()
		os.Remove(tableFile) // the test creates it: a missing file means it did not run
		defer os.Remove(tableFile)
		args = append(args, "-run", "^"+g.test+"$", "-count=1", "-v")
	} else {
		args = append(args, "-run", "^$", "-bench", g.bench, "-benchmem", "-count", strconv.Itoa(count))
	}
	args = append(args, g.args...)
	timeout := orDefault(g.timeout, "60m")
	args = append(args, "-timeout", timeout)
	args = append(args, g.pkgs...)
	env := slices.Clone(g.env)
	if tableFile != "" {
		env = append(env, g.out+"="+tableFile)
	}
	command := shellLine(env, args)
	fmt.Fprintf(os.Stderr, "benchreport: %s: %s\n", g.name, command)

	var buf bytes.Buffer
	cmd := exec.CommandContext(ctx, goCommand(), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = io.MultiWriter(os.Stdout, &buf, rawOut)
	cmd.Stderr = io.MultiWriter(os.Stderr, &buf)
	cmd.WaitDelay = 10 * time.Second
	err = cmd.Run()
	out = buf.String()
	if err != nil {
		return "", out, fmt.Errorf("%s: %w", command, err)
	}
	skips := skipped(out)

	var sb strings.Builder
	sb.WriteString(g.heading)
	if g.heading != "" {
		sb.WriteString("\n")
	}
	// The command as a reader would type it: without the temporary file.
	shown := shellLine(g.env, args)
	if g.test != "" {
		table, err := os.ReadFile(tableFile)
		if err != nil {
			return "", out, fmt.Errorf("%s wrote no table (skipped?): %w", g.test, err)
		}
		fmt.Fprintf(&sb, "Generated by `make bench`: `%s`\n\n", shown)
		sb.Write(table)
	} else {
		results, err := parseBench(strings.NewReader(out), g.name)
		if err != nil {
			return "", out, err
		}
		if len(results) == 0 {
			return "", out, fmt.Errorf("%s: no benchmark results", command)
		}
		pkgs := map[string]bool{}
		for _, r := range results {
			pkgs[r.pkg] = true
		}
		if len(pkgs) > 1 {
			for i := range results {
				results[i].name = strings.TrimPrefix(results[i].pkg, modulePath+"/") + ": " + results[i].name
			}
		}
		runs := "one run"
		if count > 1 {
			runs = fmt.Sprintf("median of %d runs", count)
		}
		fmt.Fprintf(&sb, "Generated by `make bench` (%s): `%s`\n\n", runs, shown)
		sb.WriteString(benchTable(results))
	}
	if len(skips) > 0 {
		fmt.Fprintf(&sb, "\nSkipped: %s.\n", strings.Join(skips, "; "))
	}
	if g.note != "" {
		sb.WriteString("\n" + g.note + "\n")
	}
	sb.WriteString("\n") // a blank line before the end marker ends the table
	return sb.String(), out, nil
}

const modulePath = "github.com/llmd/llmd"

func orDefault(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// goCommand is the go command: $GO (the Makefile's), or go.
func goCommand() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

// shellLine is env and go args as one shell command line.
func shellLine(env, args []string) string {
	var parts []string
	parts = append(parts, env...)
	parts = append(parts, "go")
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " |^$()*?[]{}'\"\\<>&;") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// skipped returns the benchmarks and tests go test reported as skipped,
// each with the first line of its reason.
func skipped(out string) []string {
	var skips []string
	lines := strings.Split(out, "\n")
	for i, line := range lines {
		name, ok := strings.CutPrefix(strings.TrimSpace(line), "--- SKIP: ")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, " (")
		if i+1 < len(lines) {
			if _, reason, ok := strings.Cut(strings.TrimSpace(lines[i+1]), ": "); ok {
				name += " (" + reason + ")"
			}
		}
		skips = append(skips, name)
	}
	return skips
}

// writeFileAtomic writes data to a temporary file beside path and renames
// it over path, keeping path's permissions.
func writeFileAtomic(path string, data []byte) error {
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// machine describes the machine and the run.
type machine struct {
	cpu, memory, os, kernel, goVersion string
	cpuID                              string // the CPU's own name (CPUID), as go test prints it
	cores                              int
	date                               time.Time
	commit                             string
	dirty                              bool
	loadStart, loadEnd                 string
	took                               time.Duration
	busy                               float64       // share of every core used by every process during the run
	own                                time.Duration // CPU time of the benchmarks (this program's children)
	count                              int
}

func describeMachine(ctx context.Context) machine {
	m := machine{cpu: "unknown CPU", memory: "unknown memory", os: runtime.GOOS, kernel: "unknown kernel",
		cores: runtime.NumCPU(), date: time.Now().UTC(), loadStart: loadAvg(), commit: "unknown commit"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.cpu = cpuModel(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m.memory = memTotal(string(b))
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		m.os = osName(string(b))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = "Linux " + strings.TrimSpace(string(b))
	}
	m.goVersion = runtime.Version()
	if out, err := exec.CommandContext(ctx, goCommand(), "env", "GOVERSION").Output(); err == nil {
		m.goVersion = strings.TrimSpace(string(out))
	}
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		m.commit = strings.TrimSpace(string(out))
	}
	if out, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
		m.dirty = len(bytes.TrimSpace(out)) > 0
	}
	return m
}

// String is the machine section's content.
func (m machine) String() string {
	commit := "`" + m.commit + "`"
	cpu := m.cpu
	if m.cpuID != "" && m.cpuID != m.cpu {
		cpu += ", CPUID \"" + m.cpuID + "\""
	}
	if m.dirty {
		commit += " (with uncommitted changes)"
	}
	others := max(m.busy-m.own.Seconds()/(m.took.Seconds()*float64(m.cores)), 0)
	return fmt.Sprintf("The generated tables below come from the last `make bench`: %s UTC, commit %s, on %d vCPUs (%s), "+
		"%s, %s, %s, %s. Benchmark figures are the median of `-count %d`. The run took %v; the machine's cores were %.0f%% busy "+
		"(%.0f%% of them with work other than the benchmarks), load average %s at the start and %s at the end.\n",
		m.date.Format("2006-01-02 15:04"), commit, m.cores, cpu, m.memory, m.os, m.kernel, m.goVersion, m.count,
		m.took.Round(time.Second), 100*m.busy, 100*others, m.loadStart, m.loadEnd)
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel(cpuinfo string) string {
	for line := range strings.SplitSeq(cpuinfo, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "unknown CPU"
}

// memTotal is MemTotal of /proc/meminfo in GiB.
func memTotal(meminfo string) string {
	for line := range strings.SplitSeq(meminfo, "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(v)
			if kb, err := strconv.ParseFloat(f[0], 64); err == nil && len(f) == 2 && f[1] == "kB" {
				return fmt.Sprintf("%.1f GiB of memory", kb/(1<<20))
			}
		}
	}
	return "unknown memory"
}

// osName is PRETTY_NAME of /etc/os-release.
func osName(osRelease string) string {
	for line := range strings.SplitSeq(osRelease, "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			if s, err := strconv.Unquote(v); err == nil {
				return s
			}
			return strings.Trim(v, `"'`)
		}
	}
	return runtime.GOOS
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " / ")
}

// cpuTimes are the jiffies of every core (the first line of /proc/stat).
type cpuTimes struct{ busy, total uint64 }

func machineCPU() cpuTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var ct cpuTimes
	for i, f := range strings.Fields(line)[1:] {
		if i >= 8 { // guest time is already counted in user
			break
		}
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return cpuTimes{}
		}
		ct.total += v
		if i != 3 && i != 4 { // idle, iowait
			ct.busy += v
		}
	}
	return ct
}

func (c cpuTimes) busyShare(before cpuTimes) float64 {
	if c.total <= before.total {
		return 0
	}
	return float64(c.busy-before.busy) / float64(c.total-before.total)
}

// ownCPU is the CPU time of this program's finished children (go test and
// the test binaries it ran).
func ownCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
