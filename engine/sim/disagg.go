package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/kvcache"
)

// DisaggConfig configures RunDisagg: a group of simulated llmd nodes that
// either run requests whole (Prefill 0) or split them, prefill on Prefill
// nodes and decode on Decode nodes, the prompt's KV blocks sent between
// them over an interconnect of BandwidthBytesPerSec.
type DisaggConfig struct {
	// Sim configures every node's executor; Engine every node's engine.
	Sim    Config
	Engine engine.Config
	// Prefill and Decode are the node counts. With Prefill 0 the Decode
	// nodes run requests whole (the baseline).
	Prefill, Decode int
	// BandwidthBytesPerSec is each decode node's inbound interconnect:
	// its transfers queue on it one after the other. TransferLatency is
	// added to each transfer (the round trip and the import).
	BandwidthBytesPerSec float64
	TransferLatency      time.Duration
	// TTFT and ITL are the service-level objectives: a request meets them
	// when its time to first token and its mean inter-token latency (time
	// per output token after the first, DistServe's TPOT) are within them.
	TTFT, ITL time.Duration
}

// DisaggArrival is one request of a RunDisagg workload: its arrival after
// the start, its prompt and output lengths in tokens.
type DisaggArrival struct {
	At             time.Duration
	Input, Output  int
	PromptSeed     uint64
	SharedPrefixID int // >0: the prompt starts with shared prefix #id
	SharedTokens   int // that prefix's length
}

// DisaggReport is what RunDisagg measured.
type DisaggReport struct {
	Requests, Completed int
	// MetSLO counts the completed requests within both objectives;
	// Attainment is MetSLO over Requests, and Goodput MetSLO per second
	// of the arrivals' span.
	MetSLO     int
	Attainment float64
	Goodput    float64
	// Throughput is output tokens per second of simulated time.
	Throughput float64
	// TTFT and ITL (per request: mean time per output token) percentiles.
	TTFT, ITL DisaggPercentiles
	// Transfers counts the KV transfers, of TransferBytes in all;
	// TransferTime is their mean duration, queueing on the link included.
	Transfers     int
	TransferBytes int64
	TransferTime  time.Duration
	// Simulated is the virtual time until the last request finished.
	Simulated time.Duration
}

// DisaggPercentiles are a distribution's p50, p90 and p99.
type DisaggPercentiles struct{ P50, P90, P99 time.Duration }

func percentiles(ds []time.Duration) DisaggPercentiles {
	if len(ds) == 0 {
		return DisaggPercentiles{}
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(int(q*float64(len(ds))), len(ds)-1)] }
	return DisaggPercentiles{P50: at(0.5), P90: at(0.9), P99: at(0.99)}
}

// Validate reports the first invalid field.
func (c DisaggConfig) Validate() error {
	switch {
	case c.Decode < 1:
		return fmt.Errorf("sim: disaggregation needs at least one decode node, got %d", c.Decode)
	case c.Prefill < 0:
		return fmt.Errorf("sim: prefill nodes must not be negative, got %d", c.Prefill)
	case c.Prefill > 0 && c.BandwidthBytesPerSec <= 0:
		return fmt.Errorf("sim: disaggregation needs a positive interconnect bandwidth, got %g", c.BandwidthBytesPerSec)
	case c.TransferLatency < 0 || c.TTFT <= 0 || c.ITL <= 0:
		return errors.New("sim: transfer latency must not be negative, TTFT and ITL objectives must be positive")
	}
	return c.Sim.Validate()
}

// dnode is one simulated node of RunDisagg.
type dnode struct {
	eng    *engine.Engine
	clock  *stepClock
	flying []*dflight
	// linkFree is when the node's inbound link is free (decode nodes).
	linkFree time.Time
	// routed counts the requests sent here and not yet seen finished.
	routed int
}

// stepClock is a node's virtual clock: Sleep (the executor's step) moves
// it forward.
type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time { return c.now }

func (c *stepClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.now = c.now.Add(max(d, 0))
	return nil
}

// dflight is one request on one node.
type dflight struct {
	a       DisaggArrival
	prompt  []int32
	arrival time.Time
	st      *engine.Stream
	prefill bool // the prefill part of a split request
	first   time.Time
	last    time.Time
	tokens  int
}

// devent is a transfer that lands on a decode node at a time.
type devent struct {
	at time.Time
	f  *dflight
	to *dnode
}

// RunDisagg simulates cfg's nodes under arrivals (sorted by At) on
// virtual clocks and measures TTFT, ITL and goodput against the
// objectives. A split request runs its prompt on the least busy prefill
// node (one output token, discarded), then its KV blocks (the model's KV
// bytes of the prompt's full blocks) cross the link of the least loaded
// decode node, which imports them as cached prefix blocks and runs the
// request: its prefix cache serves the prompt, it computes the last
// partial block and decodes. The first token the client sees is the
// decode node's.
func RunDisagg(ctx context.Context, cfg DisaggConfig, arrivals []DisaggArrival) (*DisaggReport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func() (*dnode, error) {
		clock := &stepClock{now: start}
		exec, err := New(cfg.Sim, clock)
		if err != nil {
			return nil, err
		}
		eng, err := engine.New(exec, clock, cfg.Engine, nil)
		if err != nil {
			return nil, err
		}
		return &dnode{eng: eng, clock: clock, linkFree: start}, nil
	}
	var prefill, decode []*dnode
	for range cfg.Prefill {
		n, err := mk()
		if err != nil {
			return nil, err
		}
		prefill = append(prefill, n)
	}
	for range cfg.Decode {
		n, err := mk()
		if err != nil {
			return nil, err
		}
		decode = append(decode, n)
	}
	all := append(slices.Clone(prefill), decode...)
	info := decode[0].eng.Info()
	layout, err := decode[0].eng.KVLayout()
	if err != nil {
		return nil, err
	}
	kvPerToken := float64(cfg.Sim.kvBytesPerToken())
	noWait, cancel := context.WithCancel(ctx)
	cancel()

	rep := &DisaggReport{Requests: len(arrivals)}
	var ttfts, itls, xfers []time.Duration
	var outTokens int64
	var transfers []devent
	next := 0
	end := start

	leastBusy := func(ns []*dnode) *dnode {
		best := ns[0]
		for _, n := range ns[1:] {
			if n.routed < best.routed {
				best = n
			}
		}
		return best
	}
	seq := 0
	submit := func(n *dnode, f *dflight, at time.Time, maxTokens int) error {
		if len(n.flying) == 0 && n.clock.now.Before(at) {
			n.clock.now = at // an idle node waits for the request
		}
		seq++
		st, err := n.eng.Submit(ctx, engine.Request{ID: fmt.Sprint("r", seq), Prompt: f.prompt, MaxTokens: maxTokens,
			N: 1, Priority: engine.PriorityPaid, Seed: f.a.PromptSeed})
		if err != nil {
			return err
		}
		f.st = st
		n.flying = append(n.flying, f)
		n.routed++
		return nil
	}
	// read takes the node's finished or started requests' events.
	read := func(n *dnode) error {
		keep := n.flying[:0]
		for _, f := range n.flying {
			done := false
			for {
				ev, err := f.st.Next(noWait)
				if err != nil {
					break
				}
				switch {
				case ev.Kind == engine.EventToken && !f.prefill:
					if f.tokens == 0 {
						f.first = ev.Time
					}
					f.last = ev.Time
					f.tokens++
				case ev.Last():
					done = true
					if ev.Err != nil {
						return fmt.Errorf("sim: request failed: %w", ev.Err)
					}
				}
				if done {
					break
				}
			}
			if !done {
				keep = append(keep, f)
				continue
			}
			n.routed--
			at := n.clock.now
			if f.prefill {
				to := leastBusy(decode)
				to.routed++ // reserved for the transfer
				blocks := (len(f.prompt) - 1) / info.BlockSize
				bytes := int64(kvPerToken * float64(blocks*info.BlockSize))
				startAt := at
				if to.linkFree.After(startAt) {
					startAt = to.linkFree
				}
				landed := startAt.Add(cfg.TransferLatency + time.Duration(float64(bytes)/cfg.BandwidthBytesPerSec*float64(time.Second)))
				to.linkFree = landed
				rep.Transfers++
				rep.TransferBytes += bytes
				xfers = append(xfers, landed.Sub(at))
				transfers = append(transfers, devent{at: landed, f: &dflight{a: f.a, prompt: f.prompt, arrival: f.arrival}, to: to})
				continue
			}
			rep.Completed++
			outTokens += int64(f.tokens)
			if f.last.After(end) {
				end = f.last
			}
			ttft := f.first.Sub(f.arrival)
			itl := time.Duration(0)
			if f.tokens > 1 {
				itl = f.last.Sub(f.first) / time.Duration(f.tokens-1)
			}
			ttfts, itls = append(ttfts, ttft), append(itls, itl)
			if ttft <= cfg.TTFT && itl <= cfg.ITL {
				rep.MetSLO++
			}
		}
		n.flying = keep
		return nil
	}

	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// The next event: an arrival or a landed transfer.
		evAt, evKind := time.Time{}, 0
		if next < len(arrivals) {
			evAt, evKind = start.Add(arrivals[next].At), 1
		}
		if len(transfers) > 0 {
			sort.Slice(transfers, func(i, j int) bool { return transfers[i].at.Before(transfers[j].at) })
			if evKind == 0 || transfers[0].at.Before(evAt) {
				evAt, evKind = transfers[0].at, 2
			}
		}
		// The busy node furthest behind steps first, while it is behind
		// the next event.
		var behind *dnode
		for _, n := range all {
			if len(n.flying) > 0 && (behind == nil || n.clock.now.Before(behind.clock.now)) {
				behind = n
			}
		}
		if behind != nil && (evKind == 0 || behind.clock.now.Before(evAt)) {
			ran, err := behind.eng.Step(ctx)
			if err != nil {
				return nil, err
			}
			if err := read(behind); err != nil {
				return nil, err
			}
			if !ran && evKind == 0 {
				return nil, errors.New("sim: a node is stuck with work it cannot run")
			}
			if !ran {
				behind.clock.now = evAt // nothing to do until the next event
			}
			continue
		}
		switch evKind {
		case 0:
			rep.Simulated = end.Sub(start)
			span := time.Duration(0)
			if len(arrivals) > 0 {
				span = arrivals[len(arrivals)-1].At
			}
			if span > 0 {
				rep.Goodput = float64(rep.MetSLO) / span.Seconds()
			}
			if rep.Requests > 0 {
				rep.Attainment = float64(rep.MetSLO) / float64(rep.Requests)
			}
			if rep.Simulated > 0 {
				rep.Throughput = float64(outTokens) / rep.Simulated.Seconds()
			}
			rep.TTFT, rep.ITL = percentiles(ttfts), percentiles(itls)
			if len(xfers) > 0 {
				var sum time.Duration
				for _, x := range xfers {
					sum += x
				}
				rep.TransferTime = sum / time.Duration(len(xfers))
			}
			return rep, nil
		case 1:
			a := arrivals[next]
			next++
			f := &dflight{a: a, prompt: disaggPrompt(a, info.VocabSize), arrival: evAt}
			if len(prefill) == 0 {
				if err := submit(leastBusy(decode), f, evAt, a.Output); err != nil {
					return nil, err
				}
				continue
			}
			f.prefill = true
			if err := submit(leastBusy(prefill), f, evAt, 1); err != nil {
				return nil, err
			}
		case 2:
			t := transfers[0]
			transfers = transfers[1:]
			bs := info.BlockSize
			chain := kvcache.HashChain(t.f.prompt[:(len(t.f.prompt)-1)/bs*bs], bs)
			data := engine.EncodeKV(engine.KVBlocks{Layout: layout, Hashes: chain, Data: make([]byte, len(chain)*layout.BlockBytes)})
			if len(t.to.flying) == 0 && t.to.clock.now.Before(t.at) {
				t.to.clock.now = t.at // the blocks land on an idle node
			}
			if _, err := t.to.eng.ImportKVStepping(data, chain); err != nil {
				return nil, err
			}
			t.to.routed-- // the reservation; submit counts it again
			if err := submit(t.to, t.f, t.at, t.f.a.Output); err != nil {
				return nil, err
			}
		}
	}
}

// disaggPrompt is a's prompt: its shared prefix's tokens, then its own.
func disaggPrompt(a DisaggArrival, vocab int) []int32 {
	p := make([]int32, 0, a.Input)
	if a.SharedPrefixID > 0 {
		r := rand.New(rand.NewPCG(uint64(a.SharedPrefixID), 0x5eed))
		for range min(a.SharedTokens, a.Input) {
			p = append(p, int32(r.IntN(vocab)))
		}
	}
	r := rand.New(rand.NewPCG(a.PromptSeed, 1))
	for len(p) < a.Input {
		p = append(p, int32(r.IntN(vocab)))
	}
	return p
}
