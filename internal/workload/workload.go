// Package workload describes the requests of a benchmark: when they
// arrive, how long their prompts and answers are, which of them share a
// system prompt, which belong to one multi-turn conversation, which are
// cancelled and on whose behalf (tenant) they are sent.
//
// Everything here is a pure function of a [Spec] and its seed: no clock,
// no network, no goroutines (LoadJSONL reads a file, nothing else does
// I/O). The same Spec gives the same items, so a load generator and a
// fleet simulator can replay the very same workload. The package imports
// nothing of llmd but engine/hashmix.
//
// Two ways to consume a workload:
//
//   - Open loop ([Spec.Rate] > 0): [Generate] returns every item with its
//     arrival offset [Item.At], a Poisson process of Rate requests per
//     second. The sender issues an item at At, or, for a later turn of a
//     conversation, when the previous turn finished if that is later.
//   - Closed loop (Rate == 0): [NewSource] hands out whole conversations
//     ([Source.NextConversation]) or items ([Source.Next]) on demand;
//     Concurrency workers each run one conversation at a time, sending a
//     turn after the previous one finished.
//
// Turn contract: turn k of a conversation is sent only after turn k-1
// finished (its answer becomes part of turn k's messages). Generate and
// Source order items so that this holds (turn k-1 always precedes turn k);
// waiting for the finish is the sender's job.
package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/llmd/llmd/engine/hashmix"
)

// Spec describes a workload. The zero value is not valid; see Validate.
type Spec struct {
	// Requests is the number of requests (turns, not conversations) to
	// send; 0 means no limit (Duration must then be set).
	Requests int
	// Duration bounds the arrivals; 0 means no limit (Requests must then
	// be set). In open loop no item arrives at or after Duration; in
	// closed loop the sender stops issuing at Duration.
	Duration time.Duration
	// Rate is the mean arrival rate in requests per second of a Poisson
	// process (exponential gaps); 0 means as fast as Concurrency allows
	// (closed loop).
	Rate float64
	// Concurrency bounds the requests in flight; in closed loop it is the
	// number of concurrent users. 0 means no bound (open loop only).
	Concurrency int
	// Input is the length of each turn's user message, in tokens;
	// Output the number of tokens to generate (max_tokens).
	Input, Output Dist
	// FirstInput, when set (not the zero Dist), is the length of a
	// conversation's first user message instead of Input: a document the
	// conversation opens with, which its later turns ask about.
	FirstInput Dist
	// SharedPrefix is the share (0..1) of conversations, hence of
	// requests on average, whose messages start with one of SystemPrompts
	// shared system prompts, chosen uniformly.
	SharedPrefix float64
	// SystemPrompts is the number of distinct shared system prompts.
	SystemPrompts int
	// SystemTokens is the length of each shared system prompt, drawn once
	// per prompt (every use of prompt i has the same text and length).
	SystemTokens Dist
	// Turns is the number of turns per conversation; Fixed(1) (or the
	// zero Dist) means single-shot requests.
	Turns Dist
	// ThinkTime is the least time between the arrival of a turn and of
	// the next turn of its conversation in open loop, and the pause after
	// a turn finished before the next is sent in closed loop.
	ThinkTime time.Duration
	// CancelRatio is the share (0..1) of requests the sender cancels
	// (closes the connection) right after the first token.
	CancelRatio float64
	// Tenants labels the tenants (for example API keys) requests are sent
	// for; each conversation belongs to one, chosen uniformly. Empty means
	// one anonymous tenant (Item.Tenant is always 0).
	Tenants []string
	// Dataset, when not empty, supplies the user messages instead of
	// generated text: each turn takes a prompt chosen uniformly, its
	// InputTokens estimated by ApproxTokens, its OutputTokens the prompt's
	// own when set, else drawn from Output.
	Dataset []Prompt
	// Seed makes the workload reproducible.
	Seed uint64
}

// Validate reports the first problem of s, nil if it can be generated.
func (s Spec) Validate() error {
	switch {
	case s.Requests < 0:
		return fmt.Errorf("requests must be >= 0, got %d", s.Requests)
	case s.Duration < 0:
		return fmt.Errorf("duration must be >= 0, got %s", s.Duration)
	case s.Requests == 0 && s.Duration == 0:
		return errors.New("set a number of requests or a duration (or both)")
	case !(s.Rate >= 0) || math.IsInf(s.Rate, 0):
		return fmt.Errorf("rate must be a finite number >= 0, got %g", s.Rate)
	case s.Concurrency < 0:
		return fmt.Errorf("concurrency must be >= 0, got %d", s.Concurrency)
	case s.Rate == 0 && s.Concurrency == 0:
		return errors.New("set a rate (open loop) or a concurrency (closed loop)")
	case s.Input.Min() < 1 && len(s.Dataset) == 0:
		return fmt.Errorf("input %w", errZeroDist)
	case s.Output.Min() < 1:
		return fmt.Errorf("output %w", errZeroDist)
	case s.FirstInput != Dist{} && s.FirstInput.Min() < 1 && len(s.Dataset) == 0:
		return fmt.Errorf("first input %w", errZeroDist)
	case !(s.SharedPrefix >= 0 && s.SharedPrefix <= 1):
		return fmt.Errorf("shared prefix must be within 0..1, got %g", s.SharedPrefix)
	case s.SharedPrefix > 0 && s.SystemPrompts < 1:
		return errors.New("a shared prefix needs at least one system prompt")
	case s.SharedPrefix > 0 && s.SystemTokens.Min() < 1:
		return fmt.Errorf("system tokens %w", errZeroDist)
	case s.SystemPrompts < 0:
		return fmt.Errorf("system prompts must be >= 0, got %d", s.SystemPrompts)
	case s.Turns != Dist{} && s.Turns.Min() < 1:
		return fmt.Errorf("turns must be >= 1")
	case s.ThinkTime < 0:
		return fmt.Errorf("think time must be >= 0, got %s", s.ThinkTime)
	case !(s.CancelRatio >= 0 && s.CancelRatio <= 1):
		return fmt.Errorf("cancel ratio must be within 0..1, got %g", s.CancelRatio)
	}
	for i, p := range s.Dataset {
		if p.Text == "" {
			return fmt.Errorf("dataset prompt %d is empty", i)
		}
	}
	return nil
}

// Item is one request of a workload: one turn of a conversation.
type Item struct {
	// At is the arrival offset from the start (open loop; 0 in closed
	// loop). Items of Generate are sorted by At.
	At time.Duration
	// Conversation numbers conversations from 0 in order of their first
	// turn; Turn numbers the turns of one from 0; Turns is how many turns
	// the conversation has (the last ones may be cut by Requests or
	// Duration).
	Conversation, Turn, Turns int
	// System is the shared system prompt the conversation starts with,
	// -1 for none; SystemTokens is its length (0 for none). Its text is
	// Spec.SystemText(System).
	System, SystemTokens int
	// InputTokens is the length of this turn's user message (without
	// the system prompt and earlier turns); OutputTokens is max_tokens.
	InputTokens, OutputTokens int
	// Cancel asks the sender to cancel the request after its first token.
	Cancel bool
	// Tenant indexes Spec.Tenants (0 when there are none).
	Tenant int
	// Prompt indexes Spec.Dataset, -1 when the user message is generated
	// text.
	Prompt int
	// Seed seeds the generated user message; see Spec.UserText.
	Seed uint64
}

// Random streams derived from Spec.Seed, so that each property of a
// conversation is a function of the seed and the conversation number only
// (Generate and Source give the same conversations).
const (
	streamArrival uint64 = 0x243f6a8885a308d3 + iota
	streamConversation
	streamSystem
	streamText
)

// rng returns the random stream (stream, index) of seed.
func rng(seed, stream uint64, index int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, mix64(stream^mix64(uint64(index)))))
}

// mix64 is splitmix64's step: the golden-ratio increment, then the
// finalizer.
func mix64(x uint64) uint64 { return hashmix.Mix64(x + 0x9e3779b97f4a7c15) }

// SystemPromptTokens returns the length of shared system prompt i, in
// tokens.
func (s Spec) SystemPromptTokens(i int) int {
	return s.SystemTokens.Sample(rng(s.Seed, streamSystem, i))
}

// SystemText returns the text of shared system prompt i: always the same
// for one seed and i.
func (s Spec) SystemText(i int) string {
	return Text(s.SystemPromptTokens(i), mix64(s.Seed^mix64(streamSystem+uint64(i))))
}

// UserText returns the user message of it: the dataset prompt when it has
// one, else generated text of it.InputTokens tokens.
func (s Spec) UserText(it Item) string {
	if it.Prompt >= 0 && it.Prompt < len(s.Dataset) {
		return s.Dataset[it.Prompt].Text
	}
	return Text(it.InputTokens, it.Seed)
}

// conversation returns the items of conversation c, At left at 0.
func (s Spec) conversation(c int) []Item {
	r := rng(s.Seed, streamConversation, c)
	turns := 1
	if s.Turns != (Dist{}) {
		turns = max(s.Turns.Sample(r), 1)
	}
	system, systemTokens := -1, 0
	if s.SharedPrefix > 0 && r.Float64() < s.SharedPrefix {
		system = r.IntN(s.SystemPrompts)
		systemTokens = s.SystemPromptTokens(system)
	}
	tenant := 0
	if len(s.Tenants) > 1 {
		tenant = r.IntN(len(s.Tenants))
	}
	items := make([]Item, turns)
	for k := range items {
		it := Item{
			Conversation: c, Turn: k, Turns: turns,
			System: system, SystemTokens: systemTokens,
			Tenant: tenant, Prompt: -1,
			Seed: r.Uint64(),
		}
		if len(s.Dataset) > 0 {
			it.Prompt = r.IntN(len(s.Dataset))
			p := s.Dataset[it.Prompt]
			it.InputTokens = ApproxTokens(p.Text)
			it.OutputTokens = p.OutputTokens
			if it.OutputTokens <= 0 {
				it.OutputTokens = s.Output.Sample(r)
			}
		} else {
			if k == 0 && s.FirstInput != (Dist{}) {
				it.InputTokens = s.FirstInput.Sample(r)
			} else {
				it.InputTokens = s.Input.Sample(r)
			}
			it.OutputTokens = s.Output.Sample(r)
		}
		it.Cancel = s.CancelRatio > 0 && r.Float64() < s.CancelRatio
		items[k] = it
	}
	return items
}

// maxItems bounds what Generate returns, so that a huge rate times a long
// duration fails instead of exhausting memory.
const maxItems = 10_000_000

// Generate returns the open-loop workload of spec: items sorted by
// arrival time At, gaps between arrivals exponential with mean 1/Rate.
// Each arrival is the next turn of a conversation whose previous turn
// arrived at least ThinkTime before (oldest first), else the first turn of
// a new conversation; so turn k-1 always precedes turn k. It stops at
// Requests items or at Duration, whichever comes first.
//
// It returns an error if spec is invalid, if Rate is 0 (use NewSource for
// closed loop) or if the workload would exceed ten million items.
func Generate(spec Spec) ([]Item, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if spec.Rate == 0 {
		return nil, errors.New("generate needs a rate; use NewSource for a closed loop")
	}
	if spec.Requests == 0 && spec.Rate*spec.Duration.Seconds() > maxItems/2 ||
		spec.Requests > maxItems {
		return nil, fmt.Errorf("workload too large: at most %d requests", maxItems)
	}
	type pending struct {
		turns   []Item
		readyAt time.Duration
	}
	var (
		arrivals = rng(spec.Seed, streamArrival, 0)
		items    []Item
		queue    []pending // ordered by readyAt: At grows, ThinkTime is fixed
		next     int
		t        float64 // seconds
	)
	if spec.Requests > 0 {
		items = make([]Item, 0, spec.Requests)
	}
	for spec.Requests == 0 || len(items) < spec.Requests {
		t += arrivals.ExpFloat64() / spec.Rate
		at := time.Duration(t * float64(time.Second))
		if spec.Duration > 0 && at >= spec.Duration {
			break
		}
		if len(items) >= maxItems {
			return nil, fmt.Errorf("workload too large: at most %d requests", maxItems)
		}
		var turns []Item
		if len(queue) > 0 && queue[0].readyAt <= at {
			turns = queue[0].turns
			queue = queue[1:]
		} else {
			turns = spec.conversation(next)
			next++
		}
		it := turns[0]
		it.At = at
		items = append(items, it)
		if len(turns) > 1 {
			queue = append(queue, pending{turns: turns[1:], readyAt: at + spec.ThinkTime})
		}
	}
	return items, nil
}

// Source hands out a closed-loop workload on demand. Its conversations
// are those Generate would produce for the same Spec (without arrival
// times). Requests bounds the items handed out; Duration is the caller's
// to enforce.
//
// Locking: a Source is safe for concurrent use.
type Source struct {
	spec Spec

	mu    sync.Mutex
	next  int    // next conversation
	given int    // items handed out
	rest  []Item // remaining turns of the conversation Next is in
}

// NewSource returns the closed-loop source of spec. It does not validate
// spec; call Spec.Validate first.
func NewSource(spec Spec) *Source {
	return &Source{spec: spec}
}

// Next returns the next item, false when Requests items were handed out.
// Items of one conversation come consecutively, in turn order; a caller
// using Next must send turn k only after turn k-1 finished. Callers that
// run one conversation per worker use NextConversation instead.
func (s *Source) Next() (Item, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spec.Requests > 0 && s.given >= s.spec.Requests {
		return Item{}, false
	}
	if len(s.rest) == 0 {
		s.rest = s.spec.conversation(s.next)
		s.next++
	}
	it := s.rest[0]
	s.rest = s.rest[1:]
	s.given++
	return it, true
}

// NextConversation returns the turns of the next conversation, cut so
// that no more than Requests items are handed out in all; false when none
// is left. A conversation Next has started is finished first.
func (s *Source) NextConversation() ([]Item, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	turns := s.rest
	s.rest = nil
	if len(turns) == 0 {
		turns = s.spec.conversation(s.next)
		s.next++
	}
	if s.spec.Requests > 0 {
		left := s.spec.Requests - s.given
		if left <= 0 {
			return nil, false
		}
		turns = turns[:min(len(turns), left)]
	}
	s.given += len(turns)
	return turns, true
}
