package tui

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
	"go.uber.org/goleak"

	"github.com/llmd/llmd/api"
)

// TestMain draws without colours (the bubbles components use the default
// renderer) and in UTC, so that views compare with golden files, and
// checks that no test leaves a goroutine of ours behind.
func TestMain(m *testing.M) {
	lipgloss.SetColorProfile(termenv.Ascii)
	time.Local = time.UTC
	// teatest leaves one goroutine per test model waiting for a SIGINT; a
	// cursor blink pending when a program ends runs out its 530 ms.
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/charmbracelet/x/exp/teatest.NewTestModel.func2"),
		goleak.IgnoreTopFunction("github.com/charmbracelet/bubbles/cursor.(*Model).BlinkCmd.func1"))
}

// testStyles are the styles with no colour and no attribute.
func testStyles() Styles {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.Ascii)
	return DefaultStyles(r)
}

// t0 is the fixture's snapshot time.
var t0 = time.Date(2026, 11, 5, 12, 0, 0, 0, time.UTC)

// Request ids of the fixture.
const (
	idDecode  = "req_0a1b2c3d4e5f60718293a4b5c6d7e8f9"
	idPrefill = "req_11b2c3d4e5f60718293a4b5c6d7e8f90"
	idQueued  = "req_22c3d4e5f60718293a4b5c6d7e8f901"
	idSwapped = "req_33d4e5f60718293a4b5c6d7e8f90123"
	idLocal   = "req_44e5f60718293a4b5c6d7e8f9012345"
)

// fixture is a node with two sim models (one at 92 % KV use, degraded),
// requests in every state, tenants near their limits and two simulated
// GPUs. generated is sim/small's generated_tokens counter.
func fixture(at time.Time, generated uint64) *api.Snapshot {
	return &api.Snapshot{
		Node: "n1", Time: at, Uptime: 3725,
		Models: []api.ModelSnapshot{
			{
				EngineStats: api.EngineStats{
					Model: "sim/small", Executor: "simulated", BlocksTotal: 1000, BlocksUsed: 620, BlocksCached: 150,
					BlockSize: 16, Running: 3, Waiting: 2, WaitingByTier: map[string]int{"batch": 1, "free": 1},
					Swapped: 0, Steps: 12345, Completed: 321, GeneratedTokens: generated, ComputedTokens: 456789,
					PrefixQueryTokens: 10000, PrefixHitTokens: 4200, Preemptions: 3, PreemptionsSwap: 1,
					PreemptionsRecompute: 2, Evictions: 7, Degrade: "none",
				},
				TTFTP50: 0.12, TTFTP95: 0.34, ITLP50: 0.021, ITLP95: 0.045,
			},
			{
				EngineStats: api.EngineStats{
					Model: "sim/mid", Executor: "simulated", BlocksTotal: 500, BlocksUsed: 460, BlocksCached: 20,
					BlockSize: 16, Running: 2, Waiting: 3, WaitingByTier: map[string]int{"batch": 2, "paid": 1},
					Swapped: 1, SwapBlocksUsed: 30, SwapBlocksTotal: 200, Steps: 999, Completed: 45,
					GeneratedTokens: 20000, ComputedTokens: 90000, Preemptions: 12, PreemptionsSwap: 9,
					PreemptionsRecompute: 3, Degrade: "limit_free", DegradeLevel: 2,
				},
				TTFTP50: 0.9, TTFTP95: 2.5, ITLP50: 0.06, ITLP95: 0.11,
			},
		},
		Requests: []api.RequestSnapshot{
			{ID: idQueued, Tenant: "acme", Model: "sim/mid", Tier: "enterprise", State: api.StateQueued,
				PromptTokens: 100, Age: 0.4},
			{ID: idPrefill, Tenant: "globex", Model: "sim/small", Tier: "free", State: api.StatePrefill,
				PromptTokens: 2048, Age: 1.1, Resumable: true},
			{ID: idDecode, Tenant: "acme", Model: "sim/small", Tier: "paid", State: api.StateDecode,
				PromptTokens: 512, CachedTokens: 256, GeneratedTokens: 120, TTFT: 0.15, TokensPerSecond: 42.5, Age: 3.2,
				Resumable: true},
			{ID: idLocal, Tenant: "local", Model: "sim/small", Tier: "paid", State: api.StateDecode,
				PromptTokens: 64, GeneratedTokens: 1500, TTFT: 0.08, TokensPerSecond: 55.1, Age: 29},
			{ID: idSwapped, Tenant: "initech", Model: "sim/mid", Tier: "batch", State: api.StateSwapped,
				PromptTokens: 4000, CachedTokens: 1024, GeneratedTokens: 300, TTFT: 0.9, TokensPerSecond: 12.3, Age: 45},
		},
		Tenants: []api.TenantSnapshot{
			{Tenant: "acme", Tier: "paid", Running: 1, Rejected1: 2,
				Limits:   api.QuotaLimits{RequestsPerMinute: 60, TokensPerMinute: 100000, Concurrency: 4, DailyTokens: 1000000},
				Usage:    api.QuotaUsage{InFlight: 3, RequestsAvailable: 6, TokensAvailable: 30000, DailyTokensUsed: 950000},
				Reserved: &api.ReservedRate{ReservedTPS: 400, DeliveredTPS: 412.6}},
			{Tenant: "globex", Tier: "free", Running: 1,
				Limits: api.QuotaLimits{RequestsPerMinute: 10, Concurrency: 1},
				Usage:  api.QuotaUsage{InFlight: 1, RequestsAvailable: 9}},
			{Tenant: "initech", Tier: "batch", Running: 1},
			{Tenant: "local", Tier: "paid", Running: 1,
				Limits: api.QuotaLimits{RequestsPerMinute: 600, TokensPerMinute: 1000000},
				Usage:  api.QuotaUsage{RequestsAvailable: 590, TokensAvailable: 990000}},
		},
		GPUs: []api.GPUInfo{
			{Index: 0, Name: "H100 x1 (sim/small)", MemoryUsed: 60 << 30, MemoryTotal: 80 << 30, Simulated: true},
			{Index: 1, Name: "H100 x1 (sim/mid)", MemoryUsed: 76 << 30, MemoryTotal: 80 << 30, Utilization: 0.63, Simulated: true},
		},
		Quota: &api.QuotaStats{Backend: "memory", Allow: 500, Deny: 12},
	}
}

// fakeTop is a TopClient serving canned snapshots and recording cancels.
type fakeTop struct {
	mu        sync.Mutex
	snap      *api.Snapshot
	err       error
	polls     int
	cancelled []string
	cancelErr error
	// follow streams a request; nil answers 404.
	follow func(ctx context.Context, id string, fn func(api.NativeDelta) error) (*api.NativeDone, error)
}

func (f *fakeTop) Snapshot(ctx context.Context) (*api.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.polls++
	return f.snap, f.err
}

func (f *fakeTop) CancelRequest(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancelled = append(f.cancelled, id)
	return f.cancelErr
}

func (f *fakeTop) FollowRequest(ctx context.Context, id string, fn func(api.NativeDelta) error) (*api.NativeDone, error) {
	if f.follow == nil {
		return nil, &api.StatusError{StatusCode: 404, Message: "no request"}
	}
	return f.follow(ctx, id, fn)
}

func (f *fakeTop) cancels() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.cancelled...)
}

// send feeds msg to m and returns the command it gave back.
func send(m tea.Model, msg tea.Msg) tea.Cmd {
	_, cmd := m.Update(msg)
	return cmd
}

// keyMsg returns the key message of a key name as Bubble Tea reports it:
// "enter", "esc", "tab", "shift+tab", "up", "down", "ctrl+c", or runes.
func keyMsg(name string) tea.KeyMsg {
	switch name {
	case "enter":
		return tea.KeyMsg{Type: tea.KeyEnter}
	case "esc":
		return tea.KeyMsg{Type: tea.KeyEsc}
	case "tab":
		return tea.KeyMsg{Type: tea.KeyTab}
	case "shift+tab":
		return tea.KeyMsg{Type: tea.KeyShiftTab}
	case "up":
		return tea.KeyMsg{Type: tea.KeyUp}
	case "down":
		return tea.KeyMsg{Type: tea.KeyDown}
	case "ctrl+c":
		return tea.KeyMsg{Type: tea.KeyCtrlC}
	case "ctrl+d":
		return tea.KeyMsg{Type: tea.KeyCtrlD}
	case "pgup":
		return tea.KeyMsg{Type: tea.KeyPgUp}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(name)}
}

// press sends each key to m in turn and returns the last command.
func press(m tea.Model, keys ...string) tea.Cmd {
	var cmd tea.Cmd
	for _, k := range keys {
		cmd = send(m, keyMsg(k))
	}
	return cmd
}

// errTest is an error for fakes to return.
var errTest = errors.New("test error")

// loop runs commands as a Bubble Tea program would: each in its own
// goroutine, their messages fed to the model one at a time by until.
type loop struct {
	t    *testing.T
	m    tea.Model
	msgs chan tea.Msg
	quit chan struct{}
}

// newLoop returns a loop for m; its goroutines stop sending when the test
// ends.
func newLoop(t *testing.T, m tea.Model) *loop {
	l := &loop{t: t, m: m, msgs: make(chan tea.Msg, 64), quit: make(chan struct{})}
	t.Cleanup(func() { close(l.quit) })
	return l
}

// run starts cmd.
func (l *loop) run(cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	go func() {
		msg := cmd()
		if batch, ok := msg.(tea.BatchMsg); ok {
			for _, c := range batch {
				l.run(c)
			}
			return
		}
		select {
		case l.msgs <- msg:
		case <-l.quit:
		}
	}()
}

// until feeds messages to the model, starting the commands it returns,
// until cond holds; it fails the test after 10 s.
func (l *loop) until(cond func() bool) {
	l.t.Helper()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case msg := <-l.msgs:
			switch msg := msg.(type) {
			case nil:
			default:
				l.run(send(l.m, msg))
			}
		case <-deadline:
			l.t.Fatal("timed out waiting for the model")
		}
	}
}
