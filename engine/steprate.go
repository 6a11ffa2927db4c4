package engine

import (
	"math"
	"time"
)

// stepFitDecay weighs the steps of the step-time fit: each step counts
// this much less than the next, so about the last 128 steps carry it.
const stepFitDecay = 1 - 1.0/128

// stepFitMinSpread is the least spread (standard deviation, in tokens) of
// the recent steps' sizes for the fit's slope to be trusted: steps all of
// one size (pure decode at a steady batch) say nothing about the cost of a
// token.
const stepFitMinSpread = 8

// stepFit estimates what a batch token costs on the executor, from the
// steps the engine ran: a least-squares line through (batch tokens, step
// time), exponentially weighted toward recent steps. The slope is the time
// per token, whose inverse is the prefill rate a router weighs queued and
// uncached prompt tokens with; the intercept (the fixed cost of a step:
// weights read, launch overhead) is left out of it. The last trusted slope
// is kept while the steps stop varying in size.
//
// Locking: none; the step goroutine owns it.
type stepFit struct {
	w, x, y, xx, xy float64 // decayed sums of 1, tokens, seconds and products
	perToken        float64 // seconds per token of the last trusted fit; 0 none yet
}

// observe adds a step of tokens batch tokens that took d.
func (f *stepFit) observe(tokens int, d time.Duration) {
	if tokens <= 0 || d <= 0 {
		return
	}
	x, y := float64(tokens), d.Seconds()
	f.w = f.w*stepFitDecay + 1
	f.x = f.x*stepFitDecay + x
	f.y = f.y*stepFitDecay + y
	f.xx = f.xx*stepFitDecay + x*x
	f.xy = f.xy*stepFitDecay + x*y
	mx, my := f.x/f.w, f.y/f.w
	vx := f.xx/f.w - mx*mx
	cov := f.xy/f.w - mx*my
	if vx >= stepFitMinSpread*stepFitMinSpread && cov > 0 {
		if s := cov / vx; !math.IsInf(s, 0) && !math.IsNaN(s) {
			f.perToken = s
		}
	}
}

// rate returns the fitted tokens per second, 0 until a fit is trusted.
func (f *stepFit) rate() float64 {
	if f.perToken <= 0 {
		return 0
	}
	return 1 / f.perToken
}
