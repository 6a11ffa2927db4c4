package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/perf/benchfmt"
)

// result is one benchmark's figures, each the median over its runs.
type result struct {
	// name is the benchmark's name without "Benchmark", sub-benchmarks
	// included; procs is its GOMAXPROCS suffix (0 when it has none).
	name  string
	procs int
	pkg   string
	runs  int
	// values maps each unit as go test printed it (ns/op, B/op,
	// allocs/op, MB/s, or the benchmark's own) to the median.
	values map[string]float64
}

// parseBench reads go test -bench output (any other lines are skipped) and
// returns one result per benchmark, in the order of first appearance, with
// the median of each unit over the runs (-count). A malformed benchmark
// line is an error.
func parseBench(r io.Reader, file string) ([]result, error) {
	type acc struct {
		result
		samples map[string][]float64
	}
	var (
		order []*acc
		byKey = map[string]*acc{}
	)
	br := benchfmt.NewReader(r, file)
	for br.Scan() {
		switch rec := br.Result().(type) {
		case *benchfmt.SyntaxError:
			return nil, rec
		case *benchfmt.Result:
			base, parts := rec.Name.Parts()
			name := strings.TrimPrefix(string(base), "Benchmark")
			procs := 0
			for _, p := range parts {
				if n, ok := strings.CutPrefix(string(p), "-"); ok {
					procs, _ = strconv.Atoi(n)
					continue
				}
				name += string(p)
			}
			pkg := rec.GetConfig("pkg")
			key := pkg + "\x00" + rec.Name.String()
			a := byKey[key]
			if a == nil {
				a = &acc{result: result{name: name, procs: procs, pkg: pkg}, samples: map[string][]float64{}}
				byKey[key] = a
				order = append(order, a)
			}
			a.runs++
			for _, v := range rec.Values {
				unit, value := v.Unit, v.Value
				if v.OrigUnit != "" { // benchfmt tidied ns/op to sec/op: keep the original
					unit, value = v.OrigUnit, v.OrigValue
				}
				a.samples[unit] = append(a.samples[unit], value)
			}
		}
	}
	if err := br.Err(); err != nil {
		return nil, err
	}
	out := make([]result, len(order))
	for i, a := range order {
		a.values = make(map[string]float64, len(a.samples))
		for u, s := range a.samples {
			a.values[u] = median(s)
		}
		out[i] = a.result
	}
	return out, nil
}

// median returns the median of s (the mean of the middle two for an even
// count); s is sorted in place.
func median(s []float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// The standard units, shown first in this order.
var standardUnits = []string{"ns/op", "B/op", "allocs/op"}

// unitHeader is a unit's column header.
func unitHeader(u string) string {
	if u == "ns/op" {
		return "time/op"
	}
	return u
}

// benchTable renders results as a markdown table: the benchmark, time/op,
// B/op, allocs/op, then every other unit (in order of first appearance).
// Cells a benchmark has no figure for are empty. The GOMAXPROCS suffix is
// shown only when the results do not all share one.
func benchTable(results []result) string {
	var units []string
	for _, u := range standardUnits {
		for _, r := range results {
			if _, ok := r.values[u]; ok {
				units = append(units, u)
				break
			}
		}
	}
	seen := map[string]bool{}
	for _, u := range units {
		seen[u] = true
	}
	// Units in the order the first benchmark lists them: map order is
	// random, so walk the results' names in a stable order.
	for _, r := range results {
		for _, u := range sortedUnits(r.values) {
			if !seen[u] {
				seen[u] = true
				units = append(units, u)
			}
		}
	}
	procs := map[int]bool{}
	for _, r := range results {
		procs[r.procs] = true
	}
	var sb strings.Builder
	sb.WriteString("| benchmark |")
	for _, u := range units {
		sb.WriteString(" " + unitHeader(u) + " |")
	}
	sb.WriteString("\n|---|")
	sb.WriteString(strings.Repeat("---:|", len(units)))
	sb.WriteString("\n")
	for _, r := range results {
		name := r.name
		if len(procs) > 1 && r.procs > 0 {
			name += fmt.Sprintf(" (GOMAXPROCS %d)", r.procs)
		}
		sb.WriteString("| " + escapeCell(name) + " |")
		for _, u := range units {
			v, ok := r.values[u]
			cell := ""
			if ok {
				cell = formatValue(u, v)
			}
			sb.WriteString(" " + cell + " |")
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

// sortedUnits returns the non-standard units of values, sorted.
func sortedUnits(values map[string]float64) []string {
	var us []string
	for u := range values {
		if !slices.Contains(standardUnits, u) {
			us = append(us, u)
		}
	}
	slices.Sort(us)
	return us
}

func escapeCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// formatValue prints v in unit u for a table cell: ns/op as a time scaled
// to ns, us, ms or s; counts of bytes and allocations as integers; anything
// else with four significant digits.
func formatValue(u string, v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Sprint(v)
	}
	switch u {
	case "ns/op":
		return formatSeconds(v / 1e9)
	case "B/op", "allocs/op":
		if v == math.Trunc(v) {
			return thousands(int64(v))
		}
		return sig(v, 4)
	}
	return sig(v, 4)
}

// formatSeconds prints a duration in seconds with three significant
// digits in the largest unit that keeps it at least 1.
func formatSeconds(s float64) string {
	a := math.Abs(s)
	if a > 0 { // round first, so that 999.6 ns is 1.00 us
		p := math.Pow(10, math.Floor(math.Log10(a))-2)
		a = math.Round(a/p) * p
		s = math.Copysign(a, s)
	}
	switch {
	case a == 0:
		return "0"
	case a < 1e-6:
		return sig(s*1e9, 3) + " ns"
	case a < 1e-3:
		return sig(s*1e6, 3) + " us"
	case a < 1:
		return sig(s*1e3, 3) + " ms"
	}
	return sig(s, 3) + " s"
}

// sig prints v rounded to n significant digits, with thousands separators
// in the integer part and no exponent.
func sig(v float64, n int) string {
	if v == 0 {
		return "0"
	}
	mag := int(math.Floor(math.Log10(math.Abs(v)))) + 1 // digits before the point
	decimals := max(n-mag, 0)
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	intPart, frac, hasFrac := strings.Cut(s, ".")
	neg := strings.HasPrefix(intPart, "-")
	intPart = strings.TrimPrefix(intPart, "-")
	if mag > n { // round away the digits past n
		p := math.Pow(10, float64(mag-n))
		intPart = strconv.FormatFloat(math.Round(math.Abs(v)/p)*p, 'f', 0, 64)
	}
	out := groupDigits(intPart)
	if hasFrac {
		out += "." + frac
	}
	if neg {
		out = "-" + out
	}
	return out
}

func thousands(n int64) string {
	if n < 0 {
		return "-" + thousands(-n)
	}
	return groupDigits(strconv.FormatInt(n, 10))
}

func groupDigits(s string) string {
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Section markers: generated content sits between a begin and an end line.
const (
	beginMarker = "<!-- generated: "
	endMarker   = "<!-- end generated: "
	markerClose = " -->"
)

// errNoSection is returned by replaceSections for content whose section
// has no markers in the document.
var errNoSection = errors.New("no generated section")

// replaceSections returns doc with the content between each named
// section's markers replaced by sections[name] (a trailing newline is
// added when missing). Everything outside the markers, and sections not
// named in sections, stay byte for byte. A marker without its end, an end
// without its marker, a section opened twice or nested, or a name in
// sections the document has no markers for is an error; doc is then not
// changed.
func replaceSections(doc []byte, sections map[string]string) ([]byte, error) {
	var out bytes.Buffer
	open := ""
	found := map[string]bool{}
	lines := bytes.SplitAfter(doc, []byte("\n"))
	for i, line := range lines {
		trimmed := strings.TrimSpace(string(line))
		if name, ok := markerName(trimmed, beginMarker); ok {
			if open != "" {
				return nil, fmt.Errorf("line %d: section %q opens inside section %q", i+1, name, open)
			}
			if found[name] {
				return nil, fmt.Errorf("line %d: section %q appears twice", i+1, name)
			}
			found[name] = true
			open = name
			out.Write(line)
			if content, ok := sections[name]; ok {
				out.WriteString(content)
				if content != "" && !strings.HasSuffix(content, "\n") {
					out.WriteString("\n")
				}
			}
			continue
		}
		if name, ok := markerName(trimmed, endMarker); ok {
			if name != open {
				return nil, fmt.Errorf("line %d: end of section %q, but %s", i+1, name, openDesc(open))
			}
			open = ""
			out.Write(line)
			continue
		}
		if open != "" {
			if _, replaced := sections[open]; replaced {
				continue
			}
		}
		out.Write(line)
	}
	if open != "" {
		return nil, fmt.Errorf("section %q has no end marker (%s%s%s)", open, endMarker, open, markerClose)
	}
	var missing []string
	for name := range sections {
		if !found[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("%w for %s: add %s%s%s ... %s%s%s", errNoSection, strings.Join(missing, ", "),
			beginMarker, missing[0], markerClose, endMarker, missing[0], markerClose)
	}
	return out.Bytes(), nil
}

func openDesc(open string) string {
	if open == "" {
		return "no section is open"
	}
	return fmt.Sprintf("section %q is open", open)
}

// markerName returns the section name of a marker line with prefix.
func markerName(line, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(line, prefix)
	if !ok {
		return "", false
	}
	name, ok := strings.CutSuffix(rest, markerClose)
	name = strings.TrimSpace(name)
	return name, ok && name != ""
}
