package daemon

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// fleetClient is an API client of base.
func fleetClient(t *testing.T, base string) *api.Client {
	t.Helper()
	c, err := api.NewClient(base, testClient(t))
	require.NoError(t, err)
	return c
}

// chatOnce streams one chat answer of max tokens from model.
func chatOnce(ctx context.Context, c *api.Client, model string, max int) (finish string, err error) {
	err = c.ChatCompletionStream(ctx, api.ChatCompletionRequest{Model: model, MaxTokens: &max,
		Messages: []api.Message{{Role: "user", Content: "Go on"}}},
		func(ch api.ChatCompletionChunk) error {
			for _, c := range ch.Choices {
				if c.FinishReason != nil {
					finish = *c.FinishReason
				}
			}
			return nil
		})
	return finish, err
}

// TestModelsLoadAndUnloadUnderLoad: models are loaded and unloaded
// while another model streams without pause; none of its requests fails.
// An unloaded model drains (its running request finishes), answers 503
// while it drains and 404 once gone; one unloaded with a short timeout
// has its request cancelled.
func TestModelsLoadAndUnloadUnderLoad(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Models = []string{"small"}
	cfg.StepTimeScale = 0.2
	d, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	base := startServer(t, d)
	c := fleetClient(t, base)
	ctx := t.Context()

	// Steady streaming load on sim/small.
	stop := make(chan struct{})
	var served, failed atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := chatOnce(ctx, c, "sim/small", 24); err != nil {
					failed.Add(1)
					t.Errorf("sim/small failed during the loads: %v", err)
					return
				}
				served.Add(1)
			}
		})
	}

	var phases []string
	st, err := c.LoadModel(ctx, api.ModelLoadRequest{Source: "sim:mid", ID: "sim/mid-2026-11-15"}, func(p api.ModelLoadProgress) {
		phases = append(phases, p.Status)
	})
	require.NoError(t, err)
	require.Equal(t, "sim/mid-2026-11-15", st.ID)
	require.Equal(t, "simulated", st.Executor)
	require.Equal(t, []string{api.LoadChecking, api.LoadBuilding, api.LoadReady}, phases)
	finish, err := chatOnce(ctx, c, "sim/mid-2026-11-15", 8)
	require.NoError(t, err)
	require.Equal(t, "length", finish)

	// Loading the same id again, or a GGUF id with the sim/ prefix, is refused.
	_, err = c.LoadModel(ctx, api.ModelLoadRequest{Source: "sim:mid", ID: "sim/mid-2026-11-15"}, nil)
	requireStatus(t, err, http.StatusConflict, "served already")
	_, err = c.LoadModel(ctx, api.ModelLoadRequest{Source: "sim:mid", ID: "mid-without-prefix"}, nil)
	requireStatus(t, err, http.StatusBadRequest, `must start with "sim/"`)

	// Unload while a long answer runs: the answer finishes, new requests
	// get 503 meanwhile, then 404.
	long := make(chan error, 1)
	go func() {
		_, err := chatOnce(ctx, c, "sim/mid-2026-11-15", 300)
		long <- err
	}()
	require.Eventually(t, func() bool { return activeOf(c, "sim/mid-2026-11-15") == 1 }, 5*time.Second, 5*time.Millisecond)
	unloaded := make(chan *api.ModelUnloadResult, 1)
	go func() {
		res, err := c.UnloadModel(ctx, "sim/mid-2026-11-15", 20*time.Second)
		assert.NoError(t, err)
		unloaded <- res
	}()
	require.Eventually(t, func() bool { return stateOf(c, "sim/mid-2026-11-15") == "draining" }, 5*time.Second, 5*time.Millisecond)
	_, err = chatOnce(ctx, c, "sim/mid-2026-11-15", 4)
	requireStatus(t, err, http.StatusServiceUnavailable, "being unloaded")
	require.NoError(t, <-long)
	res := <-unloaded
	require.Equal(t, api.ModelUnloadResult{ID: "sim/mid-2026-11-15", Finished: 1, DrainMs: res.DrainMs}, *res)
	_, err = chatOnce(ctx, c, "sim/mid-2026-11-15", 4)
	requireStatus(t, err, http.StatusNotFound, "does not exist")
	_, err = c.UnloadModel(ctx, "sim/mid-2026-11-15", 0)
	requireStatus(t, err, http.StatusNotFound, "not loaded")

	// A short drain timeout cancels what still runs.
	_, err = c.LoadModel(ctx, api.ModelLoadRequest{Source: "sim:mid", ID: "sim/mid-2026-11-15"}, nil)
	require.NoError(t, err)
	go func() {
		_, err := chatOnce(ctx, c, "sim/mid-2026-11-15", 5000)
		long <- err
	}()
	require.Eventually(t, func() bool { return activeOf(c, "sim/mid-2026-11-15") == 1 }, 5*time.Second, 5*time.Millisecond)
	res, err = c.UnloadModel(ctx, "sim/mid-2026-11-15", 50*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Cancelled)
	var se *api.StreamError
	require.ErrorAs(t, <-long, &se, "the cancelled stream ends with an error event")

	close(stop)
	wg.Wait()
	require.Zero(t, failed.Load())
	require.Positive(t, served.Load())
	ids, err := c.Models(ctx)
	require.NoError(t, err)
	require.Len(t, ids, 1)
	require.Equal(t, "sim/small", ids[0].ID)
}

// TestModelsKeepAlive: a model loaded with keep_alive is unloaded once
// idle that long, not while it serves.
func TestModelsKeepAlive(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Models = []string{"small"}
	cfg.StepTimeScale = 0.05
	d, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	c := fleetClient(t, startServer(t, d))
	ctx := t.Context()
	// keep_alive 1.5 s, used every 150 ms: it stays, with room for a
	// loaded machine's pauses; then it unloads.
	_, err = c.LoadModel(ctx, api.ModelLoadRequest{Source: "sim:small", ID: "sim/small-idle", KeepAlive: "1.5s"}, nil)
	require.NoError(t, err)
	require.Equal(t, "1.5s", keepAliveOf(c, "sim/small-idle"))
	for range 4 {
		_, err := chatOnce(ctx, c, "sim/small-idle", 4)
		require.NoError(t, err)
		time.Sleep(150 * time.Millisecond)
	}
	require.Equal(t, "ready", stateOf(c, "sim/small-idle"))
	require.Eventually(t, func() bool { return stateOf(c, "sim/small-idle") == "" }, 10*time.Second, 20*time.Millisecond)
}

// TestModelsLoadGGUFWithProgress: a GGUF file loads with its bytes read
// reported, serves, and its memory is accounted and freed; a load past
// the memory budget is refused before anything is read.
func TestModelsLoadGGUFWithProgress(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	writeTestGGUF(t, path)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	cfg := testConfig()
	cfg.Models = []string{"small"}
	cfg.KVCacheBytes = 4 << 20
	cfg.MemoryBudget = fi.Size() + 6<<20 // one copy fits, two do not
	d, err := Open(cfg, testLogger(t))
	require.NoError(t, err)
	c := fleetClient(t, startServer(t, d))
	ctx := t.Context()

	var last api.ModelLoadProgress
	reading := 0
	st, err := c.LoadModel(ctx, api.ModelLoadRequest{Source: path, ID: "tiny-2026-10-01"}, func(p api.ModelLoadProgress) {
		if p.Status == api.LoadReading {
			reading++
			last = p
		}
	})
	require.NoError(t, err)
	require.Positive(t, reading)
	require.Equal(t, fi.Size(), last.Total)
	require.Equal(t, fi.Size(), last.Completed)
	require.Equal(t, fi.Size()+4<<20, st.Memory)
	require.Equal(t, "cpu", st.Executor)
	_, err = chatOnce(ctx, c, "tiny-2026-10-01", 4)
	require.NoError(t, err)

	_, err = c.LoadModel(ctx, api.ModelLoadRequest{Source: path, ID: "tiny-copy"}, func(api.ModelLoadProgress) {})
	requireStatus(t, err, http.StatusInsufficientStorage, "memory budget")
	_, err = c.LoadModel(ctx, api.ModelLoadRequest{Source: filepath.Join(t.TempDir(), "missing.gguf")}, nil)
	requireStatus(t, err, http.StatusNotFound, "missing.gguf")

	list, err := c.LoadedModels(ctx)
	require.NoError(t, err)
	require.Equal(t, st.Memory, list.MemoryUsed)
	res, err := c.UnloadModel(ctx, "tiny-2026-10-01", 0)
	require.NoError(t, err)
	require.Equal(t, st.Memory, res.FreedBytes)
	list, err = c.LoadedModels(ctx)
	require.NoError(t, err)
	require.Zero(t, list.MemoryUsed)
	// Now the copy fits.
	_, err = c.LoadModel(ctx, api.ModelLoadRequest{Source: path, ID: "tiny-copy"}, nil)
	require.NoError(t, err)
}

func requireStatus(t *testing.T, err error, status int, msg string) {
	t.Helper()
	var se *api.StatusError
	require.True(t, errors.As(err, &se), "want a status error, got %v", err)
	require.Equal(t, status, se.StatusCode, se.Message)
	require.Contains(t, se.Message, msg)
}

func stateOf(c *api.Client, id string) string {
	if m := loadedModel(c, id); m != nil {
		return m.State
	}
	return ""
}

func activeOf(c *api.Client, id string) int64 {
	if m := loadedModel(c, id); m != nil {
		return m.Active
	}
	return -1
}

func keepAliveOf(c *api.Client, id string) string {
	if m := loadedModel(c, id); m != nil {
		return m.KeepAlive
	}
	return ""
}

func loadedModel(c *api.Client, id string) *api.ModelState {
	l, err := c.LoadedModels(context.Background())
	if err != nil {
		return nil
	}
	for _, m := range l.Models {
		if m.ID == id {
			return &m
		}
	}
	return nil
}
