package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func readFixture(t *testing.T) []result {
	t.Helper()
	f, err := os.Open("testdata/bench.txt")
	require.NoError(t, err)
	defer f.Close()
	rs, err := parseBench(f, "bench.txt")
	require.NoError(t, err)
	return rs
}

func TestParseBench(t *testing.T) {
	t.Parallel()
	rs := readFixture(t)
	var names []string
	for _, r := range rs {
		names = append(names, r.name)
	}
	// Order of first appearance; the log line between runs is skipped; a
	// benchmark without a GOMAXPROCS suffix is its own result.
	require.Equal(t, []string{"SchedulerStep/running=256/waiting=10000", "PoolAllocateRelease",
		"MemoryReserveReconcile/serial", "MemoryReserveReconcile/serial", "MemoryRead/threads=2"}, names)

	sched := rs[0]
	require.Equal(t, "github.com/llmd/llmd/engine", sched.pkg)
	require.Equal(t, 2, sched.procs)
	require.Equal(t, 3, sched.runs)
	require.Equal(t, map[string]float64{"ns/op": 27412, "tokens/step": 256, "B/op": 7408, "allocs/op": 22}, sched.values)

	pool := rs[1]
	require.Equal(t, 2, pool.runs)
	require.InDelta(t, 1886, pool.values["ns/op"], 1e-9) // the mean of the middle two
	require.InDelta(t, 7.367, pool.values["ns/block"], 1e-9)

	require.Equal(t, 0, rs[2].procs)
	require.Equal(t, "github.com/llmd/llmd/quota", rs[2].pkg)
	require.Equal(t, 2, rs[3].procs)
	require.InDelta(t, 2.23e6, rs[3].values["decisions/s"], 1e-9)
	require.InDelta(t, 18573.80, rs[4].values["MB/s"], 1e-9)
}

func TestParseBenchMalformed(t *testing.T) {
	t.Parallel()
	_, err := parseBench(strings.NewReader("pkg: x\nBenchmarkBroken-2 \t 100 \t 12 ns/op \t 7\n"), "broken.txt")
	require.Error(t, err)
	require.Contains(t, err.Error(), "broken.txt:2")

	rs, err := parseBench(strings.NewReader("PASS\nok  \tx\t0.1s\n"), "empty.txt")
	require.NoError(t, err)
	require.Empty(t, rs)
}

func TestBenchTable(t *testing.T) {
	t.Parallel()
	rs := readFixture(t)
	got := benchTable(rs[:2])
	// Only the units these two have.
	want := `| benchmark | time/op | B/op | allocs/op | tokens/step | ns/block |
|---|---:|---:|---:|---:|---:|
| SchedulerStep/running=256/waiting=10000 | 27.4 us | 7,408 | 22 | 256.0 |  |
| PoolAllocateRelease | 1.89 us | 0 | 0 |  | 7.367 |
`
	require.Equal(t, want, got)

	// Mixed GOMAXPROCS: the suffix is shown.
	got = benchTable(rs[2:4])
	require.Contains(t, got, "| MemoryReserveReconcile/serial | 552 ns | 0 | 0 | 1,811,000 | 487.0 | 243.0 |\n")
	require.Contains(t, got, "| MemoryReserveReconcile/serial (GOMAXPROCS 2) | 448 ns |")
}

func TestFormatValue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		unit string
		v    float64
		want string
	}{
		{"ns/op", 27412, "27.4 us"},
		{"ns/op", 0.5, "0.500 ns"},
		{"ns/op", 999.6, "1.00 us"},
		{"ns/op", 830627619, "831 ms"},
		{"ns/op", 12.5e9, "12.5 s"},
		{"B/op", 1234567, "1,234,567"},
		{"allocs/op", 0, "0"},
		{"allocs/op", 2.5, "2.500"},
		{"tokens/s", 12023.4, "12,020"},
		{"tokens/s", 38.53, "38.53"},
		{"preemptions/step", 0.6124, "0.6124"},
		{"x", -1500, "-1,500"},
	} {
		require.Equal(t, c.want, formatValue(c.unit, c.v), "%v %s", c.v, c.unit)
	}
}

func TestReplaceSections(t *testing.T) {
	t.Parallel()
	doc := "# Title\n\nHand-written.\n<!-- generated: a -->\nold a\nold a 2\n<!-- end generated: a -->\nMiddle.\n" +
		"  <!-- generated: b -->\nold b\n<!-- end generated: b -->\nEnd.\n"
	got, err := replaceSections([]byte(doc), map[string]string{"a": "new a"})
	require.NoError(t, err)
	require.Equal(t, "# Title\n\nHand-written.\n<!-- generated: a -->\nnew a\n<!-- end generated: a -->\nMiddle.\n"+
		"  <!-- generated: b -->\nold b\n<!-- end generated: b -->\nEnd.\n", string(got))

	got, err = replaceSections([]byte(doc), map[string]string{"a": "", "b": "x\ny\n"})
	require.NoError(t, err)
	require.Equal(t, "# Title\n\nHand-written.\n<!-- generated: a -->\n<!-- end generated: a -->\nMiddle.\n"+
		"  <!-- generated: b -->\nx\ny\n<!-- end generated: b -->\nEnd.\n", string(got))

	same, err := replaceSections([]byte(doc), nil)
	require.NoError(t, err)
	require.Equal(t, doc, string(same))

	for name, bad := range map[string]string{
		"no end":        "<!-- generated: a -->\nx\n",
		"stray end":     "x\n<!-- end generated: a -->\n",
		"wrong end":     "<!-- generated: a -->\n<!-- end generated: b -->\n",
		"nested":        "<!-- generated: a -->\n<!-- generated: b -->\n<!-- end generated: b -->\n<!-- end generated: a -->\n",
		"twice":         "<!-- generated: a -->\n<!-- end generated: a -->\n<!-- generated: a -->\n<!-- end generated: a -->\n",
		"missing block": "<!-- generated: b -->\n<!-- end generated: b -->\n",
	} {
		_, err := replaceSections([]byte(bad), map[string]string{"a": "new"})
		require.Error(t, err, name)
	}
	_, err = replaceSections([]byte("text\n"), map[string]string{"a": "new"})
	require.ErrorIs(t, err, errNoSection)
}

// The file at the repository's root has a marker for every section.
func TestBenchmarksMarkers(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../BENCHMARKS.md")
	require.NoError(t, err)
	sections := map[string]string{"machine": ""}
	for _, g := range groups(10000) {
		sections[g.name] = ""
	}
	_, err = replaceSections(doc, sections)
	require.NoError(t, err)
}

func TestSkipped(t *testing.T) {
	t.Parallel()
	out := "BenchmarkA-2 1 1 ns/op\n--- SKIP: BenchmarkRedisReserveReconcile\n    bench_test.go:181: redis-server not installed\n" +
		"--- SKIP: TestX (0.00s)\n"
	require.Equal(t, []string{"BenchmarkRedisReserveReconcile (redis-server not installed)", "TestX"}, skipped(out))
}

func TestMachineParsers(t *testing.T) {
	t.Parallel()
	require.Equal(t, "Oxide Virtual Turin-like Processor",
		cpuModel("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: Oxide Virtual Turin-like Processor   \n"))
	require.Equal(t, "24.0 GiB of memory", memTotal("MemTotal:       25165824 kB\nMemFree: 1 kB\n"))
	require.Equal(t, "Debian GNU/Linux 12 (bookworm)", osName("NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"))
	require.Equal(t, `go test -run '^$' -bench 'A|B' ./engine/`, shellLine(nil, []string{"test", "-run", "^$", "-bench", "A|B", "./engine/"}))
	require.Equal(t, `LLMD_STREAMS=10 go test -count=1`, shellLine([]string{"LLMD_STREAMS=10"}, []string{"test", "-count=1"}))
}

func TestWriteFileAtomic(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "B.md")
	require.NoError(t, os.WriteFile(path, []byte("old"), 0o640))
	require.NoError(t, writeFileAtomic(path, []byte("new")))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "new", string(b))
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), st.Mode().Perm())
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left")
}

// fakeGo writes a script that stands for the go command: `env GOVERSION`
// prints a version, anything else prints the fixture and exits with code.
func fakeGo(t *testing.T, code int) string {
	t.Helper()
	fixture, err := filepath.Abs("testdata/bench.txt")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "go")
	script := "#!/bin/sh\nif [ \"$1\" = env ]; then echo go1.26.8; exit 0; fi\ncat '" + fixture + "'\nexit " +
		string(rune('0'+code)) + "\n"
	require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
	return path
}

const runDoc = "# Benchmarks\n\n<!-- generated: machine -->\nold machine\n<!-- end generated: machine -->\n\n" +
	"## Scheduler\n\nHand-written.\n\n<!-- generated: scheduler -->\nold table\n<!-- end generated: scheduler -->\n"

func TestRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	require.NoError(t, os.WriteFile(path, []byte(runDoc), 0o644))
	t.Setenv("GO", fakeGo(t, 0))
	require.NoError(t, run(context.Background(), options{file: path, count: 1, only: []string{"scheduler"}}))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	doc := string(b)
	require.Contains(t, doc, "## Scheduler\n\nHand-written.\n\n<!-- generated: scheduler -->\nGenerated by `make bench` (one run): "+
		"`go test -run '^$' -bench SchedulerStep -benchmem -count 1 -timeout 60m ./engine/`\n\n| benchmark | time/op |")
	require.Contains(t, doc, "| engine: SchedulerStep/running=256/waiting=10000 (GOMAXPROCS 2) | 27.4 us |") // two packages: names carry theirs
	require.Contains(t, doc, "Skipped: BenchmarkRedisReserveReconcile (redis-server not installed).\n\n<!-- end generated: scheduler -->\n")
	require.Contains(t, doc, "<!-- generated: machine -->\nThe generated tables below come from the last `make bench`: ")
	require.Contains(t, doc, "go1.26.8")
	require.Contains(t, doc, `CPUID "Oxide Virtual Turin-like Processor"`)
	require.NotContains(t, doc, "old")
}

// A failing benchmark leaves the file as it was.
func TestRunFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	require.NoError(t, os.WriteFile(path, []byte(runDoc), 0o644))
	t.Setenv("GO", fakeGo(t, 1))
	err := run(context.Background(), options{file: path, count: 1, only: []string{"scheduler"}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "section scheduler")
	b, rerr := os.ReadFile(path)
	require.NoError(t, rerr)
	require.Equal(t, runDoc, string(b))

	// A section the file has no markers for fails before anything runs.
	err = run(context.Background(), options{file: path, count: 1, only: []string{"usage"}})
	require.ErrorIs(t, err, errNoSection)
	err = run(context.Background(), options{file: path, count: 1, only: []string{"nope"}})
	require.Error(t, err)
	require.False(t, errors.Is(err, errNoSection))
}
