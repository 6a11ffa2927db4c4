package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/kvcache"
)

// schedHarness drives a Scheduler from a datadriven script.
type schedHarness struct {
	s      *Scheduler
	events []string
	eos    map[string]int // request id -> generated count at which to emit EOS
	gen    map[uint64]int
}

// TestSchedulerScripts runs testdata/sched/*.txt. Commands:
//
//	init blocks=N block-size=N budget=N max-running=N context=N watermark=N expect=N
//	                swap=N swap-overhead=MS no-prefix-cache=0|1
//	                expect is the default expected output at admission (1);
//	                swapping n blocks costs swap-overhead+n ms one way, and
//	                recomputing t tokens t ms
//	submit id=ID tokens=1-10,50-52 max=N [n=N] [prio=shadow|batch|free|paid|enterprise] [tenant=T] [eos-at=N]
//	step            decide a batch, print it, apply fake tokens, print events
//	cancel id=ID
//	blocks          print the pool and every running sequence's block table
//	idle            check the idle invariant
func TestSchedulerScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/sched", func(t *testing.T, path string) {
		var h *schedHarness
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "init":
				h = newSchedHarness(t, d)
				return ""
			case "submit":
				return h.submit(t, d)
			case "step":
				return h.step()
			case "cancel":
				var id string
				d.ScanArgs(t, "id", &id)
				h.s.Cancel(id)
				return h.flush()
			case "blocks":
				return h.blocks()
			case "idle":
				if err := h.s.CheckIdle(); err != nil {
					return err.Error()
				}
				return "idle"
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
	})
}

func newSchedHarness(t *testing.T, d *datadriven.TestData) *schedHarness {
	blocks, bs, budget, running, ctx, wm, expect := 16, 4, 32, 8, 256, 0, 1
	swapBlocks, swapOverhead, noPrefix := 0, 0, false
	for _, a := range d.CmdArgs {
		v, err := strconv.Atoi(a.Vals[0])
		require.NoError(t, err)
		switch a.Key {
		case "blocks":
			blocks = v
		case "block-size":
			bs = v
		case "budget":
			budget = v
		case "max-running":
			running = v
		case "context":
			ctx = v
		case "watermark":
			wm = v
		case "expect":
			expect = v
		case "swap":
			swapBlocks = v
		case "swap-overhead":
			swapOverhead = v
		case "no-prefix-cache":
			noPrefix = v == 1
		default:
			t.Fatalf("unknown init arg %q", a.Key)
		}
	}
	pool, err := kvcache.NewPool(blocks, bs)
	require.NoError(t, err)
	h := &schedHarness{eos: map[string]int{}, gen: map[uint64]int{}}
	h.s, err = NewScheduler(SchedulerConfig{
		MaxBatchTokens: budget, MaxRunning: running, ContextLength: ctx,
		EOS: []int32{0}, WatermarkBlocks: wm, DefaultExpectedOutput: expect,
		DisablePrefixCache: noPrefix, SwapBlocks: swapBlocks,
		// Swapping a block one way costs 1ms plus a fixed overhead;
		// recomputing costs 1ms per token.
		SwapCost:      func(n int) time.Duration { return time.Duration(swapOverhead+n) * time.Millisecond },
		RecomputeCost: func(n int) time.Duration { return time.Duration(n) * time.Millisecond },
	}, pool, func(r *Request, ev Event) {
		name := r.ID
		if ev.Index >= 0 {
			name = fmt.Sprintf("%s/%d", r.ID, ev.Index)
		}
		switch {
		case ev.Kind == EventToken:
			h.events = append(h.events, fmt.Sprintf("%s token %d", name, ev.Token))
		case ev.Last():
			h.events = append(h.events, fmt.Sprintf("%s done in=%d cached=%d out=%d", name,
				ev.Usage.InputTokens, ev.Usage.CachedTokens, ev.Usage.OutputTokens))
		default:
			h.events = append(h.events, fmt.Sprintf("%s finish %s", name, ev.Finish))
		}
	})
	require.NoError(t, err)
	return h
}

func parseTokens(t *testing.T, spec string) []int32 {
	var toks []int32
	for _, part := range strings.Split(spec, ",") {
		lo, hi, found := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		require.NoError(t, err)
		b := a
		if found {
			b, err = strconv.Atoi(hi)
			require.NoError(t, err)
		}
		for v := a; v <= b; v++ {
			toks = append(toks, int32(v))
		}
	}
	return toks
}

var prioNames = map[string]Priority{"shadow": PriorityShadow, "batch": PriorityBatch, "free": PriorityFree, "paid": PriorityPaid,
	"enterprise": PriorityEnterprise}

func (h *schedHarness) submit(t *testing.T, d *datadriven.TestData) string {
	req := Request{N: 1, Priority: PriorityPaid}
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "id":
			req.ID = a.Vals[0]
		case "tokens":
			req.Prompt = parseTokens(t, a.Vals[0])
		case "max":
			req.MaxTokens, _ = strconv.Atoi(a.Vals[0])
		case "n":
			req.N, _ = strconv.Atoi(a.Vals[0])
		case "prio":
			p, ok := prioNames[a.Vals[0]]
			require.True(t, ok, "unknown priority %q", a.Vals[0])
			req.Priority = p
		case "tenant":
			req.Tenant = a.Vals[0]
		case "eos-at":
			h.eos[req.ID], _ = strconv.Atoi(a.Vals[0])
		default:
			t.Fatalf("unknown submit arg %q", a.Key)
		}
	}
	if err := h.s.Add(req); err != nil {
		return "error: " + err.Error()
	}
	return "ok"
}

// step decides a batch and applies fake tokens: choice c of a request
// produces 100*(c+1) + its output index, or EOS (0) at eos-at.
func (h *schedHarness) step() string {
	plan := h.s.Step()
	var b strings.Builder
	if plan.Empty() {
		b.WriteString("empty\n")
	}
	for _, c := range plan.Batch.SwapOut {
		fmt.Fprintf(&b, "swap-out %d -> host %d\n", c.Device, c.Host)
	}
	for _, c := range plan.Batch.SwapIn {
		fmt.Fprintf(&b, "swap-in host %d -> %d\n", c.Host, c.Device)
	}
	for _, c := range plan.Batch.Copies {
		fmt.Fprintf(&b, "copy %d -> %d\n", c.Src, c.Dst)
	}
	out := &Output{Tokens: make([]int32, len(plan.Batch.Seqs))}
	for i, in := range plan.Batch.Seqs {
		seq := plan.seqs[i]
		kind := "prefill"
		if in.Sample && len(in.Tokens) == 1 && seq.generated > 0 {
			kind = "decode"
		}
		sample := ""
		if in.Sample {
			sample = " sample"
		}
		fmt.Fprintf(&b, "%s %s pos=%d n=%d ctx=%d%s blocks=%v\n", seqName(seq), kind, in.Pos, len(in.Tokens), in.Context, sample, in.Blocks)
		out.Tokens[i] = -1
		if in.Sample {
			if at, ok := h.eos[seq.r.req.ID]; ok && in.Generated == at {
				out.Tokens[i] = 0
			} else {
				out.Tokens[i] = int32(100*(seq.index+1) + in.Generated)
			}
		}
	}
	h.s.Apply(plan, out, time.Time{})
	b.WriteString(h.flush())
	return b.String()
}

func seqName(seq *sequence) string {
	if seq.index < 0 {
		return seq.r.req.ID + "/*"
	}
	return fmt.Sprintf("%s/%d", seq.r.req.ID, seq.index)
}

func (h *schedHarness) flush() string {
	var b strings.Builder
	for _, e := range h.events {
		b.WriteString(e)
		b.WriteByte('\n')
	}
	h.events = h.events[:0]
	return b.String()
}

func (h *schedHarness) blocks() string {
	p := h.s.Pool()
	var b strings.Builder
	fmt.Fprintf(&b, "pool: total=%d used=%d cached=%d free=%d\n", p.NumBlocks(), p.NumUsed(), p.NumCached(), p.NumFree()-p.NumCached())
	seqs := slices.Clone(h.s.running)
	for _, seq := range seqs {
		refs := make([]int, len(seq.blocks))
		for i, blk := range seq.blocks {
			refs[i] = p.RefCount(blk)
		}
		fmt.Fprintf(&b, "running %s computed=%d tokens=%d blocks=%v refs=%v\n", seqName(seq), seq.computed, len(seq.tokens), seq.blocks, refs)
	}
	for _, seq := range h.s.waiting.all() {
		fmt.Fprintf(&b, "waiting %s computed=%d tokens=%d\n", seqName(seq), seq.computed, len(seq.tokens))
	}
	for _, seq := range h.s.swapped {
		fmt.Fprintf(&b, "swapped %s computed=%d tokens=%d host=%v\n", seqName(seq), seq.computed, len(seq.tokens), seq.host)
	}
	st := h.s.Stats()
	fmt.Fprintf(&b, "stats: preemptions=%d (swap=%d recompute=%d) cached-tokens=%d swap-used=%d\n",
		st.Preemptions, st.PreemptionsSwap, st.PreemptionsRecompute, st.CachedTokens, h.s.Swap().NumUsed())
	return b.String()
}

// TestSwapOrRecompute checks the per-victim choice: swap when a round trip
// over the host link costs less than recomputing, and there is room.
func TestSwapOrRecompute(t *testing.T) {
	pool, err := kvcache.NewPool(64, 16)
	require.NoError(t, err)
	s, err := NewScheduler(SchedulerConfig{
		MaxBatchTokens: 64, MaxRunning: 8, ContextLength: 1024, SwapBlocks: 8,
		SwapCost:      func(n int) time.Duration { return time.Duration(2000+n*100) * time.Microsecond },
		RecomputeCost: func(n int) time.Duration { return time.Duration(n*50) * time.Microsecond },
	}, pool, nil)
	require.NoError(t, err)
	s.plan = &Plan{}
	for _, tc := range []struct {
		computed int
		swap     bool
	}{
		{computed: 16, swap: false},  // 2x2.1ms swap vs 0.8ms recompute
		{computed: 100, swap: false}, // 2x2.7ms vs 5ms
		{computed: 128, swap: true},  // 2x2.8ms vs 6.4ms
		{computed: 200, swap: false}, // 13 blocks do not fit 8 swap slots
	} {
		seq := &sequence{r: &request{req: Request{Priority: PriorityPaid}}, index: 0, computed: tc.computed}
		require.Equal(t, tc.swap, s.shouldSwap(seq), "computed=%d", tc.computed)
	}
}
