package daemon

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/kvcache"
	"github.com/llmd/llmd/pipeline"
)

// byteTokenizer is a test tokenizer: one token per byte.
type byteTokenizer struct{}

func (byteTokenizer) Encode(s string) []int32 {
	toks := make([]int32, len(s))
	for i := range len(s) {
		toks[i] = int32(s[i])
	}
	return toks
}

func (byteTokenizer) Decode(toks []int32) string {
	b := make([]byte, len(toks))
	for i, t := range toks {
		b[i] = byte(t)
	}
	return string(b)
}

func (byteTokenizer) DecodeToken(t int32) string { return string([]byte{byte(t)}) }
func (byteTokenizer) VocabSize() int             { return 256 }

// fakeReplica is a scripted engine. Each request gets the events of
// script(req), delivered one per delay.
type fakeReplica struct {
	noPrefixCache
	info   engine.ExecutorInfo
	maxSeq int
	delay  time.Duration
	// err, if set, is returned by Submit.
	err    error
	script func(req engine.Request) []engine.Event

	mu        sync.Mutex
	submitted []engine.Request
	cancelled int
	degrade   engine.DegradeLevel
}

// newFake returns a fake of model id whose answer to every choice is the
// bytes of text.
func newFake(id string, contextLength int, text string) *fakeReplica {
	f := &fakeReplica{info: engine.ExecutorInfo{Model: id, NumBlocks: 64, BlockSize: 16, ContextLength: contextLength}}
	f.maxSeq = contextLength
	f.script = func(req engine.Request) []engine.Event { return answer(req, text) }
	return f
}

// answer scripts text for every choice of req, cut at MaxTokens.
func answer(req engine.Request, text string) []engine.Event {
	toks := byteTokenizer{}.Encode(text)
	reason := engine.FinishStop
	if len(toks) > req.MaxTokens {
		toks, reason = toks[:req.MaxTokens], engine.FinishLength
	}
	var evs []engine.Event
	for _, t := range toks {
		for c := range req.N {
			evs = append(evs, engine.Event{Kind: engine.EventToken, Index: c, Token: t})
		}
	}
	for c := range req.N {
		evs = append(evs, engine.Event{Kind: engine.EventFinish, Index: c, Finish: reason})
	}
	return append(evs, engine.Event{Kind: engine.EventFinish, Index: -1, Usage: engine.Usage{
		InputTokens: len(req.Prompt), CachedTokens: 3, OutputTokens: len(toks) * req.N}})
}

func (f *fakeReplica) Submit(ctx context.Context, req engine.Request) (pipeline.EventStream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.submitted = append(f.submitted, req)
	return &fakeStream{f: f, sub: ctx, req: req, events: f.script(req), delay: f.delay}, nil
}

func (f *fakeReplica) Info() engine.ExecutorInfo { return f.info }
func (f *fakeReplica) MaxSeqTokens() int         { return f.maxSeq }
func (f *fakeReplica) Stats() engine.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return engine.Stats{Model: f.info.Model, Degrade: f.degrade}
}

func (f *fakeReplica) Requests(context.Context) ([]engine.RequestState, error) { return nil, nil }

// noPrefixCache is the prefix directory of a test replica that caches
// nothing.
type noPrefixCache struct{}

func (noPrefixCache) BlockSize() int                    { return 16 }
func (noPrefixCache) CachedPrefix([]kvcache.Hash) int   { return 0 }
func (noPrefixCache) RecentPrefixes(int) []kvcache.Hash { return nil }

func (f *fakeReplica) setDegrade(l engine.DegradeLevel) {
	f.mu.Lock()
	f.degrade = l
	f.mu.Unlock()
}

func (f *fakeReplica) requests() []engine.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]engine.Request(nil), f.submitted...)
}

func (f *fakeReplica) cancellations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cancelled
}

// fakeStream delivers a script; once the submit context ends it finishes
// every choice as cancelled, as the engine does at its next step.
type fakeStream struct {
	f         *fakeReplica
	sub       context.Context
	req       engine.Request
	events    []engine.Event
	delay     time.Duration
	due       time.Time // when the next event may be delivered
	cancelled bool
	generated int
	finished  map[int]bool
}

func (s *fakeStream) Next(ctx context.Context) (engine.Event, error) {
	if len(s.events) == 0 {
		return engine.Event{}, io.EOF
	}
	if s.delay > 0 && !s.cancelled {
		if s.due.IsZero() {
			s.due = time.Now().Add(s.delay)
		}
		t := time.NewTimer(time.Until(s.due))
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.sub.Done():
		case <-ctx.Done():
			return engine.Event{}, ctx.Err()
		}
		s.due = time.Now().Add(s.delay)
	}
	if s.finished == nil {
		s.finished = map[int]bool{}
	}
	if s.sub.Err() != nil && !s.cancelled && len(s.finished) < s.req.N {
		// Like the engine at its next step: finish what is left.
		s.cancelled = true
		s.f.mu.Lock()
		s.f.cancelled++
		s.f.mu.Unlock()
		s.events = nil
		for c := range s.req.N {
			if !s.finished[c] {
				s.events = append(s.events, engine.Event{Kind: engine.EventFinish, Index: c, Finish: engine.FinishCancelled})
			}
		}
		s.events = append(s.events, engine.Event{Kind: engine.EventFinish, Index: -1,
			Usage: engine.Usage{InputTokens: len(s.req.Prompt), OutputTokens: s.generated}})
	}
	ev := s.events[0]
	s.events = s.events[1:]
	switch {
	case ev.Kind == engine.EventToken:
		s.generated++
	case ev.Kind == engine.EventFinish && ev.Index >= 0:
		s.finished[ev.Index] = true
	}
	return ev, nil
}
