package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// table is a run's result.
type table struct {
	start, end     time.Time
	machine        string
	llamaVersion   string
	threads        int
	rounds         int
	bwStart, bwEnd bandwidths
	shapes         []*shapeResult
}

// markdown renders the table with the run's conditions above it.
func (t *table) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Same run, %s to %s UTC; %s; llama.cpp %s; %d threads on both sides; memory read bandwidth (vector loads) %.1f GB/s at the start, %.1f at the end (copy, bytes read plus written: %.1f and %.1f); %d rounds A/B interleaved, median [min-max].\n\n",
		t.start.UTC().Format("2006-01-02 15:04"), t.end.UTC().Format("15:04"), t.machine, t.llamaVersion, t.threads,
		t.bwStart.read, t.bwEnd.read, t.bwStart.copy, t.bwEnd.copy, t.rounds)
	b.WriteString("| file | measure | llama.cpp | llmd | llmd vs llama.cpp |\n|---|---|---|---|---|\n")
	bw := (t.bwStart.read + t.bwEnd.read) / 2 * 1e9 // a decode only reads the weights
	for _, r := range t.shapes {
		head := r.shape.name
		if r.weightBytes > 0 {
			head += fmt.Sprintf(" (%.0f MB of weights per token; roofline %.1f tok/s)", float64(r.weightBytes)/1e6, bw/float64(r.weightBytes))
		}
		for _, m := range measures {
			s := r.samples[m]
			if s == nil {
				continue
			}
			ratio := "-"
			if len(s[sideLlama]) > 0 && len(s[sideLlmd]) > 0 {
				ratio = ratioCell(s[sideLlama], s[sideLlmd], lowerBetter[m])
			}
			cell := summary(s[sideLlmd])
			if m == mGen1 && r.weightBytes > 0 && len(s[sideLlmd]) > 0 {
				cell += fmt.Sprintf(" (%.0f%% of roofline)", 100*median(s[sideLlmd])*float64(r.weightBytes)/bw)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", head, m, summary(s[sideLlama]), cell, ratio)
			head = ""
		}
		if ex, srv := r.samples[mGen8Served], r.samples[mSrv8Dec]; ex != nil && srv != nil && len(ex[sideLlmd]) > 0 && len(srv[sideLlmd]) > 0 {
			fmt.Fprintf(&b, "| | llmd's 8-stream decode through HTTP over its executor's as served (goal: 0.9x or more) | | %s over %s | %s |\n",
				summary(srv[sideLlmd]), summary(ex[sideLlmd]), ratioCell(ex[sideLlmd], srv[sideLlmd], false))
		}
		if r.failed != [2]int{} {
			fmt.Fprintf(&b, "| | failed requests through HTTP | %d | %d | |\n", r.failed[sideLlama], r.failed[sideLlmd])
		}
	}
	b.WriteString("\nRatios above 1 are llmd ahead (for TTFT: llama.cpp's time over llmd's); the range is the worst and best pairing of the rounds.\n")
	return b.String()
}

// summary is "median [min-max]" of vs.
func summary(vs []float64) string {
	if len(vs) == 0 {
		return "-"
	}
	if len(vs) == 1 {
		return format(vs[0])
	}
	return fmt.Sprintf("%s [%s-%s]", format(median(vs)), format(slices.Min(vs)), format(slices.Max(vs)))
}

// ratioCell is llmd's median over llama.cpp's (inverted when lower is
// better), with the range of the worst and best pairing.
func ratioCell(llama, llmd []float64, lower bool) string {
	r := func(a, b float64) float64 {
		if lower {
			a, b = b, a
		}
		if a == 0 {
			return 0
		}
		return b / a
	}
	mid := r(median(llama), median(llmd))
	lo, hi := r(slices.Max(llama), slices.Min(llmd)), r(slices.Min(llama), slices.Max(llmd))
	if lower {
		lo, hi = r(slices.Min(llama), slices.Max(llmd)), r(slices.Max(llama), slices.Min(llmd))
	}
	if len(llama) == 1 && len(llmd) == 1 {
		return fmt.Sprintf("**%.2fx**", mid)
	}
	return fmt.Sprintf("**%.2fx** [%.2f-%.2f]", mid, lo, hi)
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func format(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
