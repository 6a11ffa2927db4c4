package tui

import (
	"fmt"
	"strings"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/llmd/llmd/api"
)

// Header is the gauges above the table of llmctl top: per model its KV
// cache, tokens/s over the last minute, latencies, preemptions, prefix hit
// rate and degradation; the running and waiting sequences per tier; and
// the GPUs.
type Header struct {
	st    Styles
	snap  *api.Snapshot
	rates *rateTracker
	loads map[string]tierLoad

	width, maxHeight int
}

var _ Component = (*Header)(nil)

// NewHeader returns a header with nothing to show yet.
func NewHeader(st Styles) *Header {
	return &Header{st: st, rates: newRateTracker()}
}

// Init implements tea.Model.
func (h *Header) Init() tea.Cmd { return nil }

// Update implements tea.Model; the header changes only through SetData.
func (h *Header) Update(tea.Msg) (tea.Model, tea.Cmd) { return h, nil }

// SetSize implements Component: height is the most rows the header may
// take; it takes fewer when it has less to show (see Height).
func (h *Header) SetSize(width, height int) {
	h.width, h.maxHeight = max(width, 0), max(height, 0)
}

// SetData shows snapshot s, with the output rates tracked in rates.
func (h *Header) SetData(s *api.Snapshot, rates *rateTracker) {
	if rates == nil {
		rates = newRateTracker()
	}
	h.snap, h.rates, h.loads = s, rates, tierLoads(s)
}

// Height returns the rows the header takes at its size.
func (h *Header) Height() int { return len(h.lines()) }

// View implements tea.Model.
func (h *Header) View() string { return strings.Join(h.lines(), "\n") }

func (h *Header) lines() []string {
	if h.snap == nil || h.width == 0 || h.maxHeight == 0 {
		return nil
	}
	var out []string
	l := h.layoutModels()
	for _, m := range h.snap.Models {
		out = append(out, h.modelLines(m, l)...)
	}
	if len(h.snap.Models) == 0 {
		out = append(out, h.st.Dim.Render("no models"))
	} else {
		out = append(out, h.tierLines(l.nameW)...)
	}
	out = append(out, h.gpuLines()...)
	out = append(out, h.rolloutLines()...)
	for i, l := range out {
		out[i] = clip(l, h.width)
	}
	if len(out) > h.maxHeight {
		more := len(out) - h.maxHeight + 1
		out = append(out[:h.maxHeight-1], clip(h.st.Dim.Render(
			fmt.Sprintf("… %d more header lines: enlarge the terminal, or see the models view (3)", more)), h.width))
	}
	return out
}

// clip cuts a styled line to width cells.
func clip(s string, width int) string {
	if lipgloss.Width(s) <= width {
		return s
	}
	return ansi.Truncate(s, width, "…")
}

// kvBar draws the KV cache: used blocks in the level's colour, cached
// ones, then free ones.
func (h *Header) kvBar(m api.ModelSnapshot, width int) string {
	free := max(m.BlocksTotal-m.BlocksUsed-m.BlocksCached, 0)
	c := cells(width, float64(m.BlocksUsed), float64(m.BlocksCached), float64(free))
	if m.BlocksTotal == 0 {
		c = []int{0, 0, width}
	}
	return h.st.style(fillLevel(kvFill(m))).Render(strings.Repeat(glyphUsed, c[0])) +
		h.st.BarCached.Render(strings.Repeat(glyphCached, c[1])) +
		h.st.BarFree.Render(strings.Repeat(glyphFree, c[2]))
}

// Widths of the header's bars.
const (
	minBar = 8
	// minKVBar is the narrowest KV bar that keeps the degradation on its
	// line; narrower, the degradation moves to the tok/s line.
	minKVBar = 20
	maxKVBar = 40
	minSpark = 16
	// maxSpark is one cell per second of the minute shown.
	maxSpark = 60
)

// modelLayout is how every model's lines are laid out at the header's
// width, so that their bars line up.
type modelLayout struct {
	nameW, numW, degW int
	barW              int
	// degOnKV puts the degradation on the KV line, else on the tok/s line.
	degOnKV bool
}

func (h *Header) layoutModels() modelLayout {
	var l modelLayout
	for _, m := range h.snap.Models {
		l.nameW = max(l.nameW, lipgloss.Width(m.Model))
		l.numW = max(l.numW, len(fmt.Sprint(m.BlocksTotal)))
		l.degW = max(l.degW, lipgloss.Width(degradeText(m)))
	}
	l.nameW = min(l.nameW, 20)
	// name, " sim", "  KV ", bar, " 100%", "  used N cached N free N"
	kvFixed := l.nameW + 4 + 5 + 5 + 2 + len("used  cached  free ") + 3*l.numW
	degFixed := 2 + len("degrade ") + l.degW
	l.barW = h.width - kvFixed - degFixed
	l.degOnKV = l.barW >= minKVBar
	if !l.degOnKV {
		l.barW = h.width - kvFixed
	}
	l.barW = max(minBar, min(maxKVBar, l.barW))
	return l
}

func (h *Header) modelLines(m api.ModelSnapshot, l modelLayout) []string {
	st := h.st
	lbl, val := st.Label.Render, st.Value.Render
	name := st.Model.Render(fit(m.Model, l.nameW, false))
	upstream := strings.HasPrefix(m.Executor, "upstream:")
	switch {
	case m.Executor == "simulated":
		name += " " + st.Dim.Render("sim")
	case upstream:
		name += " " + st.Dim.Render("up ")
	default:
		name += "    "
	}
	kv := kvFill(m)
	free := max(m.BlocksTotal-m.BlocksUsed-m.BlocksCached, 0)
	n := func(v int) string { return val(fit(fmt.Sprint(v), l.numW, true)) }
	kvLine := name + "  " + lbl("KV ") + h.kvBar(m, l.barW) +
		" " + st.style(fillLevel(kv)).Render(fit(fmtPct(kv), 4, true))
	if upstream {
		// An upstream engine reports a fraction, not blocks.
		kvLine += "  " + st.Dim.Render("the engine's KV cache ("+strings.TrimPrefix(m.Executor, "upstream:")+")")
	} else {
		kvLine += "  " + lbl("used ") + n(m.BlocksUsed) + " " + lbl("cached ") + n(m.BlocksCached) + " " + lbl("free ") + n(free)
	}
	degStyle := st.OK
	if degraded(m) {
		degStyle = st.Hot
	}
	deg := "  " + lbl("degrade ") + degStyle.Render(degradeText(m))
	if l.degOnKV {
		kvLine += deg
		deg = ""
	} else {
		// Padded, so that the sparklines below line up.
		deg += strings.Repeat(" ", l.degW-lipgloss.Width(degradeText(m)))
	}

	rate := h.rates.current(m.Model)
	spark := func(w int) string {
		return "  " + lbl("tok/s ") + st.Spark.Render(h.rates.spark(m.Model, w)) + " " + val(fit(fmtRate(rate), 5, true)) + deg
	}
	hit := "-"
	if f, ok := prefixHit(m); ok {
		hit = fmt.Sprintf("%.1f%%", f*100)
	}
	stats := "  " + lbl("TTFT ") + val(fmtLatency(m.TTFTP50)+"/"+fmtLatency(m.TTFTP95)) +
		"  " + lbl("ITL ") + val(fmtLatency(m.ITLP50)+"/"+fmtLatency(m.ITLP95)) + lbl(" p50/p95") +
		"  " + lbl("preempt ") + val(fmt.Sprint(m.Preemptions)) +
		"  " + lbl("prefix hit ") + val(hit)
	sparkFixed := lipgloss.Width(spark(0))
	if w := h.width - sparkFixed - lipgloss.Width(stats); w >= minSpark {
		return []string{kvLine, spark(min(w, maxSpark)) + stats}
	}
	w := max(minBar, min(maxSpark, h.width-sparkFixed))
	return []string{kvLine, spark(w), stats}
}

// tierLines draws each model's running/waiting sequences per tier.
func (h *Header) tierLines(nameW int) []string {
	st := h.st
	const colW = 11
	var b strings.Builder
	b.WriteString(st.Label.Render(fit("  run/wait", nameW+2, false)))
	for _, t := range tiers {
		b.WriteString(st.Label.Render(fit(t, colW, true)))
	}
	out := []string{b.String()}
	for _, m := range h.snap.Models {
		b.Reset()
		b.WriteString(fit("  "+m.Model, nameW+2, false))
		tl := h.loads[m.Model]
		for _, t := range tiers {
			r, w := tl.running[t], tl.waiting[t]
			cell := fit(fmt.Sprintf("%d/%d", r, w), colW, true)
			if r == 0 && w == 0 {
				cell = st.Dim.Render(cell)
			}
			b.WriteString(cell)
		}
		out = append(out, b.String())
	}
	return out
}

// gpuLines draws the GPUs, as many to a line as fit.
func (h *Header) gpuLines() []string {
	gpus := h.snap.GPUs
	if len(gpus) == 0 {
		return nil
	}
	st := h.st
	allSim := true
	for _, g := range gpus {
		allSim = allSim && g.Simulated
	}
	prefix := st.Label.Render("GPU ")
	if allSim {
		prefix = st.Label.Render("GPU ") + st.Dim.Render("(simulated) ")
	}
	var out []string
	line, lineW := prefix, lipgloss.Width(prefix)
	for i, g := range gpus {
		e := h.gpuEntry(g, !allSim)
		ew := lipgloss.Width(e)
		if i > 0 && lineW+2+ew > h.width {
			out = append(out, line)
			line, lineW = strings.Repeat(" ", lipgloss.Width(prefix))+e, lipgloss.Width(prefix)+ew
			continue
		}
		if i > 0 {
			line += "  "
			lineW += 2
		}
		line += e
		lineW += ew
	}
	return append(out, line)
}

// maxGPUName is the most cells of a GPU's name shown: enough for a sim
// group's "H100 SXM 80GB x1 (sim/flagship)" on an 80-column line.
const maxGPUName = 32

func (h *Header) gpuEntry(g api.GPUInfo, tagSim bool) string {
	st := h.st
	lbl, val := st.Label.Render, st.Value.Render
	name := g.Name
	if lipgloss.Width(name) > maxGPUName {
		name = ansi.Truncate(name, maxGPUName, "…")
	}
	s := val(fmt.Sprintf("#%d %s", g.Index, name))
	if g.MemoryTotal > 0 {
		f := frac(float64(g.MemoryUsed), float64(g.MemoryTotal))
		s += " " + lbl("mem ") + st.style(fillLevel(f)).Render(burnBar(f, 5)) +
			" " + val(fmtGiB(g.MemoryUsed)+"/"+fmtGiB(g.MemoryTotal)+"G")
	}
	s += " " + lbl("util ") + val(fmtPct(g.Utilization))
	if g.TemperatureC > 0 {
		s += " " + val(fmt.Sprintf("%.0f°C", g.TemperatureC))
	}
	if g.PowerW > 0 {
		s += " " + val(fmt.Sprintf("%.0fW", g.PowerW))
	}
	if tagSim && g.Simulated {
		s += " " + st.Dim.Render("simulated")
	}
	return s
}

// rolloutLines are the models config's rollouts (a rolled-back canary
// stands out) and the safety check's figures, when there are any.
func (h *Header) rolloutLines() []string {
	st := h.st
	var out []string
	for _, r := range h.snap.Rollouts {
		line := st.Label.Render("rollout ") + st.Value.Render(r.Alias) + st.Dim.Render(" stable ") + st.Value.Render(r.Stable)
		switch r.State {
		case "running":
			line += st.Dim.Render(" canary ") + st.Value.Render(r.Canary) + st.Dim.Render(" "+percentText(r.Percent))
		case "rolled_back":
			line += st.Dim.Render(" canary ") + st.Value.Render(r.Canary) + " " + st.Warn.Render("ROLLED BACK: "+r.Reason)
		}
		if r.Shadow != "" {
			line += st.Dim.Render(fmt.Sprintf(" shadow %s %g%%", r.Shadow, r.ShadowPercent))
		}
		out = append(out, line)
	}
	if s := h.snap.Safety; s != nil {
		line := st.Label.Render("safety ") + st.Value.Render(fmt.Sprintf("%d checks", s.Checks)) +
			st.Dim.Render(fmt.Sprintf("  %d blocked  %d flagged  ", s.Blocked, s.Flagged))
		fails := fmt.Sprintf("%d failed", s.Failures)
		if s.Failures > 0 {
			line += st.Warn.Render(fails)
		} else {
			line += st.Dim.Render(fails)
		}
		line += st.Dim.Render(fmt.Sprintf("  p50 %.1fms  p95 %.1fms", s.P50Ms, s.P95Ms))
		out = append(out, line)
	}
	return out
}

// percentText writes a canary's share per tier: "free 5% paid 1%".
func percentText(p map[string]float64) string {
	var parts []string
	for _, tier := range []string{"free", "paid", "enterprise", "batch"} {
		if v, ok := p[tier]; ok {
			parts = append(parts, fmt.Sprintf("%s %g%%", tier, v))
		}
	}
	return strings.Join(parts, " ")
}
