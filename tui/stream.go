package tui

import (
	"context"
	"sync"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/llmd/llmd/api"
)

// streamEvent is one event of a token stream on its way from the goroutine
// reading it to the program.
type streamEvent struct {
	// text is a token delta; at is when it arrived.
	text string
	at   time.Time
	// last marks the stream's final event, with its done event or error.
	last bool
	done *api.NativeDone
	err  error
}

// streamMsg delivers the events of stream id read from its channel in one
// go: text is their deltas joined; first is when the first non-empty one
// arrived (zero when none did).
type streamMsg struct {
	id int
	// ch is the stream's channel, to read the next events from.
	ch    <-chan streamEvent
	text  string
	first time.Time
	// end is set when the stream is over, with at (when it ended), done
	// and err as the stream ended.
	end  bool
	at   time.Time
	done *api.NativeDone
	err  error
}

// streamBuffer is the capacity of a stream's channel; maxBatch bounds the
// events one streamMsg carries, so the screen keeps up with fast streams.
const (
	streamBuffer = 256
	maxBatch     = 256
)

// readStream returns the command that waits for stream id's next events
// on ch and delivers them as one streamMsg. The model runs it again after
// each message until one has end set.
func readStream(id int, ch <-chan streamEvent) tea.Cmd {
	return func() tea.Msg {
		msg := streamMsg{id: id, ch: ch}
		ev, ok := <-ch
		for n := 0; ; n++ {
			if !ok {
				// Closed without its final event: the stream's context
				// ended before anyone read it.
				msg.end, msg.err = true, context.Canceled
				return msg
			}
			if ev.text != "" && msg.first.IsZero() {
				msg.first = ev.at
			}
			msg.text += ev.text
			if ev.last {
				msg.end, msg.at, msg.done, msg.err = true, ev.at, ev.done, ev.err
				return msg
			}
			if n >= maxBatch {
				return msg
			}
			select {
			case ev, ok = <-ch:
			default:
				return msg
			}
		}
	}
}

// streamFunc opens a token stream and calls fn with each delta until it
// ends, as [api.Client.Chat] does.
type streamFunc func(ctx context.Context, fn func(api.NativeDelta) error) (*api.NativeDone, error)

// runStream returns the command that runs open under ctx, sending each
// delta and then the final event into ch, which it closes at the end. Once
// ctx is done it stops sending (nobody reads any more) and returns. It
// delivers no message itself: the stream's end travels through ch, after
// the deltas. g tracks it so that the model's Close can wait for it.
func runStream(ctx context.Context, g *group, ch chan<- streamEvent, now func() time.Time, open streamFunc) tea.Cmd {
	return func() tea.Msg {
		defer close(ch)
		if !g.enter() {
			return nil
		}
		defer g.leave()
		done, err := open(ctx, func(d api.NativeDelta) error {
			select {
			case ch <- streamEvent{text: d.Delta, at: now()}:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		select {
		case ch <- streamEvent{last: true, at: now(), done: done, err: err}:
		case <-ctx.Done():
		}
		return nil
	}
}

// group tracks the goroutines of a model's commands that do I/O, so that
// Close can wait for them after cancelling them. Unlike a sync.WaitGroup,
// a command that starts after close does not run at all.
type group struct {
	mu     sync.Mutex
	idle   *sync.Cond
	n      int
	closed bool
}

func newGroup() *group {
	g := &group{}
	g.idle = sync.NewCond(&g.mu)
	return g
}

// enter registers a command starting; false when the group is closed and
// the command must not run.
func (g *group) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.n++
	return true
}

// leave registers a command's end.
func (g *group) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n == 0 {
		g.idle.Broadcast()
	}
}

// closeAndWait refuses new commands and waits until the running ones have
// left.
func (g *group) closeAndWait() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for g.n > 0 {
		g.idle.Wait()
	}
}
