package daemon

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSoak is EN-11: LLMD_SOAK=<duration> (e.g. 5m; make soak) runs the
// sim server for that long at about 80% of its measured capacity, with 10%
// of the requests cancelled (by disconnect or DELETE). After a warm-up it
// samples the process's RSS and goroutines: RSS must stay flat (growth
// under 5%), goroutines must come back to their baseline once the load
// stops, and the engine must end idle. It prints the figures. Skipped
// without LLMD_SOAK.
func TestSoak(t *testing.T) {
	env := os.Getenv("LLMD_SOAK")
	if env == "" {
		t.Skip("set LLMD_SOAK to a duration (e.g. 5m) to run the soak test")
	}
	dur, err := time.ParseDuration(env)
	require.NoError(t, err, "LLMD_SOAK")
	require.GreaterOrEqual(t, dur, 30*time.Second, "LLMD_SOAK: at least 30s")

	// A line per request would drown the figures.
	s := newStoreServerLogged(t, slog.New(slog.DiscardHandler), func(c *Config) {
		c.StepTimeScale = 1 // an H100's step times
		c.ResumeTTL = 10 * time.Second
		c.ResumeGrace = 5 * time.Second
	})
	base := startChecked(t, s)
	ld := &soakLoad{base: base, c: poolClient(t, 256)}
	time.Sleep(time.Second)
	goroutinesBefore := runtime.NumGoroutine()

	// Capacity: completions per second with 128 clients back to back.
	calibrate := max(5*time.Second, dur/10)
	capacity := ld.closedLoop(t, 128, calibrate)
	rate := 0.8 * capacity
	t.Logf("capacity %.1f requests/s (closed loop, 128 clients, %v); soak at %.1f/s for %v", capacity, calibrate, rate, dur)

	// The soak: open-loop arrivals at rate, sampled every two seconds.
	type sample struct {
		at               time.Duration
		rss, goMem, heap uint64
		goroutines       int
		done             int64
	}
	var samples []sample
	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		ld.openLoop(rate, stopLoad)
	}()
	began := time.Now()
	tick := time.NewTicker(2 * time.Second)
	for time.Since(began) < dur {
		<-tick.C
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		samples = append(samples, sample{at: time.Since(began), rss: rssBytes(t), goMem: ms.Sys - ms.HeapReleased,
			heap: ms.HeapAlloc, goroutines: runtime.NumGoroutine(), done: ld.done.Load()})
	}
	tick.Stop()
	close(stopLoad)
	<-loadDone
	ld.wg.Wait()

	// Idle again: engine, logs (after their TTL) and goroutines.
	requireIdle(t, s)
	require.Eventually(t, func() bool { return s.streams.Len() == 0 }, s.cfg.ResumeTTL+5*time.Second, 100*time.Millisecond,
		"stream logs not expired")
	ld.c.CloseIdleConnections()
	// Polled here, not with Eventually, whose own goroutine would count.
	goroutinesAfter := runtime.NumGoroutine()
	for deadline := time.Now().Add(10 * time.Second); goroutinesAfter > goroutinesBefore && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		goroutinesAfter = runtime.NumGoroutine()
	}
	if goroutinesAfter > goroutinesBefore {
		var sb strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&sb, 1)
		t.Fatalf("%d goroutines before the load, %d after:\n%s", goroutinesBefore, goroutinesAfter, sb.String())
	}

	// RSS: the largest sample of the first third after the warm-up (the
	// first fifth, at least 30 s: caches and the resume logs of the last
	// ResumeTTL fill up first) against the largest of the last third.
	warm := samples[min(max(len(samples)/5, 15), len(samples)/2):]
	third := max(1, len(warm)/3)
	maxRSS := func(ss []sample) (m uint64) {
		for _, x := range ss {
			m = max(m, x.rss)
		}
		return m
	}
	early, late := maxRSS(warm[:third]), maxRSS(warm[len(warm)-third:])
	requests := warm[len(warm)-1].done - warm[0].done
	growth := float64(late)/float64(early) - 1
	perRequest := (float64(late) - float64(early)) / float64(max(requests, 1))
	for _, x := range samples {
		t.Logf("t=%5.0fs rss=%6.1f MiB go=%6.1f MiB heap=%6.1f MiB goroutines=%5d requests=%d", x.at.Seconds(),
			float64(x.rss)/(1<<20), float64(x.goMem)/(1<<20), float64(x.heap)/(1<<20), x.goroutines, x.done)
	}
	gor := make([]int, len(warm))
	for i, x := range warm {
		gor[i] = x.goroutines
	}
	t.Logf("soak %v at %.1f req/s (80%% of %.1f): %d requests (%d cancelled: %d by DELETE, %d by disconnect), %d errors, %d events",
		dur, rate, capacity, ld.done.Load(), ld.cancelled.Load(), ld.deleted.Load(), ld.cancelled.Load()-ld.deleted.Load(),
		ld.errors.Load(), ld.events.Load())
	t.Logf("RSS after warm-up %.1f MiB, at the end %.1f MiB: growth %+.2f%% (%+.0f bytes/request over %d requests)",
		float64(early)/(1<<20), float64(late)/(1<<20), 100*growth, perRequest, requests)
	t.Logf("goroutines: %d before the load, %d to %d under load, %d after", goroutinesBefore, slices.Min(gor), slices.Max(gor),
		goroutinesAfter)
	require.Zero(t, ld.errors.Load(), "requests failed")
	require.Less(t, growth, 0.05, "RSS grew")
}

// rssBytes is the process's resident set size (Linux), or the memory the
// Go runtime holds from the OS elsewhere.
func rssBytes(t *testing.T) uint64 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				require.NoError(t, err)
				return kb << 10
			}
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Sys - ms.HeapReleased
}

// soakLoad sends the soak's requests: a mix of OpenAI streams, native
// streams and JSON requests, 10% of them cancelled.
type soakLoad struct {
	base string
	c    *http.Client
	wg   sync.WaitGroup
	n    atomic.Int64

	done, cancelled, deleted, errors, events atomic.Int64
}

// closedLoop runs clients back to back for d and returns completions per
// second.
func (ld *soakLoad) closedLoop(t *testing.T, clients int, d time.Duration) float64 {
	stop := time.Now().Add(d)
	start := ld.done.Load()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for time.Now().Before(stop) {
				ld.one(rand.Float64() < 0.1)
			}
		})
	}
	wg.Wait()
	require.Zero(t, ld.errors.Load(), "requests failed during calibration")
	return float64(ld.done.Load()-start) / d.Seconds()
}

// openLoop starts requests at rate per second (exponential gaps) until
// stop is closed; at most 1,024 are in flight.
func (ld *soakLoad) openLoop(rate float64, stop <-chan struct{}) {
	sem := make(chan struct{}, 1024)
	for {
		gap := time.Duration(rand.ExpFloat64() / rate * float64(time.Second))
		select {
		case <-stop:
			return
		case <-time.After(gap):
		}
		select {
		case sem <- struct{}{}:
		default:
			ld.errors.Add(1) // the server fell behind by 1,024 requests
			continue
		}
		ld.wg.Go(func() {
			defer func() { <-sem }()
			ld.one(rand.Float64() < 0.1)
		})
	}
}

// one sends one request, cancelling it early if cancel is set.
func (ld *soakLoad) one(cancel bool) {
	i := ld.n.Add(1)
	kind := i % 10 // 0-3 OpenAI stream, 4-6 native stream, 7-9 JSON
	words := make([]string, 24)
	for j := range words {
		words[j] = fmt.Sprintf("w%d", (int(i)*7+j)%64) // shared prefixes now and then
	}
	content := strings.Join(words, " ")
	var path, body string
	switch {
	case kind < 4:
		path, body = "/v1/chat/completions", openaiBody("sim/small", i, 64, content)
	case kind < 7:
		path, body = "/v1/chat", nativeBody(i, 64, content)
	default:
		path = "/v1/chat/completions"
		body = fmt.Sprintf(`{"model":"sim/small","seed":%d,"max_tokens":64,"messages":[{"role":"user","content":%q}]}`, i, content)
	}
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	if cancel && kind >= 7 {
		// A JSON client that gives up.
		var give context.CancelFunc
		ctx, give = context.WithTimeout(ctx, time.Duration(5+rand.IntN(50))*time.Millisecond)
		defer give()
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ld.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := ld.c.Do(req)
	if err != nil {
		if cancel && ctx.Err() != nil {
			ld.cancelled.Add(1)
			ld.done.Add(1)
			return
		}
		ld.errors.Add(1)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		ld.errors.Add(1)
		_, _ = io.Copy(io.Discard, resp.Body)
		return
	}
	if kind >= 7 {
		if _, err := io.Copy(io.Discard, resp.Body); err != nil && !(cancel && ctx.Err() != nil) {
			ld.errors.Add(1)
			return
		}
		if cancel && ctx.Err() != nil {
			ld.cancelled.Add(1)
		}
		ld.done.Add(1)
		return
	}
	stopAt := -1
	if cancel {
		stopAt = 2 + rand.IntN(20)
	}
	br := bufio.NewReader(resp.Body)
	events := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err != io.EOF {
				ld.errors.Add(1)
				return
			}
			break
		}
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		events++
		ld.events.Add(1)
		if events == stopAt {
			if i%2 == 0 {
				// DELETE, then read the stream to its terminal event.
				del, _ := http.NewRequestWithContext(ctx, http.MethodDelete, ld.base+"/v1/requests/"+resp.Header.Get("X-Request-Id"), nil)
				if dr, err := ld.c.Do(del); err == nil {
					_, _ = io.Copy(io.Discard, dr.Body)
					dr.Body.Close()
					if dr.StatusCode == http.StatusOK {
						ld.deleted.Add(1)
					}
				}
				continue
			}
			stop() // disconnect
			break
		}
	}
	if cancel {
		ld.cancelled.Add(1)
	}
	ld.done.Add(1)
}
