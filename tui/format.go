package tui

import (
	"fmt"
	"math"
	"strings"
)

// fmtLatency writes a latency given in seconds: "-" for 0 (none measured),
// "850µs", "120ms", "1.25s", "12.3s", "2m05s".
func fmtLatency(s float64) string {
	switch {
	case s <= 0 || math.IsNaN(s):
		return "-"
	case s < 0.001:
		return fmt.Sprintf("%dµs", int(math.Round(s*1e6)))
	case s < 1:
		return fmt.Sprintf("%dms", int(math.Round(s*1e3)))
	case s < 10:
		return fmt.Sprintf("%.2fs", s)
	case s < 60:
		return fmt.Sprintf("%.1fs", s)
	}
	return fmtAge(s)
}

// fmtAge writes an age or uptime given in seconds in at most 6 cells:
// "5s", "3m02s", "1h04m", "2d03h".
func fmtAge(s float64) string {
	if s < 0 || math.IsNaN(s) {
		s = 0
	}
	n := int64(s)
	switch {
	case n < 60:
		return fmt.Sprintf("%ds", n)
	case n < 3600:
		return fmt.Sprintf("%dm%02ds", n/60, n%60)
	case n < 86400:
		return fmt.Sprintf("%dh%02dm", n/3600, n%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", n/86400, n%86400/3600)
}

// fmtCount writes a count in at most 5 cells: "999", "12.3k", "4.5M".
func fmtCount(n float64) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d", int64(n))
	case n < 100e3:
		return fmt.Sprintf("%.1fk", n/1e3)
	case n < 1e6:
		return fmt.Sprintf("%dk", int64(n/1e3))
	case n < 100e6:
		return fmt.Sprintf("%.1fM", n/1e6)
	case n < 1e9:
		return fmt.Sprintf("%dM", int64(n/1e6))
	}
	return fmt.Sprintf("%.1fG", n/1e9)
}

// fmtRate writes a rate (tokens per second): "-" for 0, "7.5", "512",
// "12.3k".
func fmtRate(r float64) string {
	switch {
	case r <= 0 || math.IsNaN(r):
		return "-"
	case r < 100:
		return fmt.Sprintf("%.1f", r)
	case r < 1000:
		return fmt.Sprintf("%d", int64(math.Round(r)))
	}
	return fmtCount(r)
}

// fmtPct writes a fraction as a percentage: "42%", "100%".
func fmtPct(f float64) string {
	if math.IsNaN(f) {
		return "-"
	}
	return fmt.Sprintf("%d%%", int(math.Round(f*100)))
}

// fmtGiB writes a byte count in GiB: "40.0".
func fmtGiB(b int64) string {
	return fmt.Sprintf("%.1f", float64(b)/(1<<30))
}

// frac returns part/whole clamped to 0..1; 0 when whole is 0.
func frac(part, whole float64) float64 {
	if whole <= 0 {
		return 0
	}
	return max(0, min(1, part/whole))
}

// Bar glyphs.
const (
	glyphUsed   = "█"
	glyphCached = "▒"
	glyphFree   = "░"
)

// cells splits width cells in proportion to parts, rounding so that the
// sum is width (a part above 0 gets at least one cell when there is room).
func cells(width int, parts ...float64) []int {
	out := make([]int, len(parts))
	var total float64
	for _, p := range parts {
		total += max(p, 0)
	}
	if width <= 0 || total <= 0 {
		return out
	}
	used := 0
	for i, p := range parts {
		n := int(math.Round(max(p, 0) / total * float64(width)))
		if p > 0 && n == 0 {
			n = 1
		}
		n = min(n, width-used)
		out[i] = n
		used += n
	}
	// Rounding may leave cells over: they go to the last part above 0.
	for i := len(parts) - 1; i >= 0 && used < width; i-- {
		if parts[i] > 0 {
			out[i] += width - used
			used = width
		}
	}
	return out
}

// burnBar draws a fraction 0..1 of a limit in width cells: "███░░".
func burnBar(f float64, width int) string {
	c := cells(width, f, 1-f)
	return strings.Repeat(glyphUsed, c[0]) + strings.Repeat(glyphFree, c[1])
}

// sparkGlyphs are the sparkline's levels, lowest first.
var sparkGlyphs = []rune("▁▂▃▄▅▆▇█")

// sparkline draws values as one glyph each, scaled to the largest; a NaN
// value (no sample) is a space.
func sparkline(values []float64) string {
	var top float64
	for _, v := range values {
		if !math.IsNaN(v) {
			top = max(top, v)
		}
	}
	var b strings.Builder
	for _, v := range values {
		switch {
		case math.IsNaN(v):
			b.WriteByte(' ')
		case top <= 0:
			b.WriteRune(sparkGlyphs[0])
		default:
			i := int(math.Round(v / top * float64(len(sparkGlyphs)-1)))
			b.WriteRune(sparkGlyphs[max(0, min(i, len(sparkGlyphs)-1))])
		}
	}
	return b.String()
}
