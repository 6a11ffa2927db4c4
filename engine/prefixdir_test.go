package engine

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/kvcache"
)

// summaryKeys is the chain's summary keys as RecentPrefixes orders them
// after the prompt is admitted: the last full block, then depths ... 7, 3,
// 1, 0.
func summaryKeys(chain []kvcache.Hash, depths ...int) []kvcache.Hash {
	keys := make([]kvcache.Hash, len(depths))
	for i, d := range depths {
		keys[i] = chain[d]
	}
	return keys
}

// runRequest runs a request to its end.
func runRequest(t *testing.T, e *Engine, id string, p []int32, maxTokens int) {
	t.Helper()
	st, err := e.Submit(t.Context(), Request{ID: id, Prompt: p, MaxTokens: maxTokens, N: 1})
	require.NoError(t, err)
	_, fin, _, err := Collect(t.Context(), st)
	require.NoError(t, err)
	require.Equal(t, FinishLength, fin[0])
}

func TestPrefixDirectoryAfterRequests(t *testing.T) {
	e := startEngine(t, newFakeExec(64, 16, 4096), DefaultConfig())
	require.Equal(t, 16, e.BlockSize())
	a, b := prompt(100, 0), prompt(100, 1000)
	chainA, chainB := kvcache.HashChain(a, e.BlockSize()), kvcache.HashChain(b, e.BlockSize())
	require.Len(t, chainA, 6)
	require.Zero(t, e.CachedPrefix(chainA))
	require.Empty(t, e.RecentPrefixes(10))

	runRequest(t, e, "a", a, 4)
	// 100 prompt tokens and 3 fed-back outputs are computed: 6 full blocks.
	require.Equal(t, 6, e.CachedPrefix(chainA))
	require.Equal(t, 3, e.CachedPrefix(chainA[:3]))
	require.Zero(t, e.CachedPrefix(chainB))
	require.Zero(t, e.CachedPrefix(nil))
	require.Equal(t, summaryKeys(chainA, 5, 3, 1, 0), e.RecentPrefixes(10))

	runRequest(t, e, "b", b, 4)
	require.Equal(t, 6, e.CachedPrefix(chainB))
	require.Equal(t, append(summaryKeys(chainB, 5, 3, 1, 0), summaryKeys(chainA, 5, 3, 1, 0)...), e.RecentPrefixes(10))
	require.Equal(t, summaryKeys(chainB, 5, 3, 1), e.RecentPrefixes(3))
	require.Nil(t, e.RecentPrefixes(0))

	// A prompt sharing a's first two blocks moves them to the front, once.
	c := append(append([]int32{}, a[:32]...), prompt(40, 2000)...)
	chainC := kvcache.HashChain(c, e.BlockSize())
	require.Equal(t, chainA[:2], chainC[:2])
	runRequest(t, e, "c", c, 4)
	require.Equal(t, 6, e.CachedPrefix(chainA), "a's blocks are shared, not copied")
	require.Equal(t, 4, e.CachedPrefix(chainC))
	want := append(summaryKeys(chainC, 3, 1, 0), summaryKeys(chainB, 5, 3, 1, 0)...)
	want = append(want, summaryKeys(chainA, 5, 3)...)
	require.Equal(t, want, e.RecentPrefixes(100))
}

func TestPrefixDirectoryForgetsEvictedBlocks(t *testing.T) {
	// 16 blocks: a request of 100 prompt and 4 output tokens holds 7, so
	// a few more such requests evict every cached block of the first.
	e := startEngine(t, newFakeExec(16, 16, 4096), DefaultConfig())
	a := prompt(100, 0)
	chainA := kvcache.HashChain(a, e.BlockSize())
	runRequest(t, e, "a", a, 4)
	require.Equal(t, 6, e.CachedPrefix(chainA))

	var last []kvcache.Hash
	for i := range 3 {
		p := prompt(100, 1000*(i+1))
		runRequest(t, e, fmt.Sprint("fill", i), p, 4)
		last = kvcache.HashChain(p, e.BlockSize())
		if i == 1 {
			// The deepest blocks go first: what is left is a's leading
			// blocks.
			n := e.CachedPrefix(chainA)
			require.Less(t, n, 6)
			for _, h := range chainA[n:] {
				require.Zero(t, e.CachedPrefix([]kvcache.Hash{h}), "block past the cached prefix is still indexed")
			}
		}
	}
	require.Positive(t, e.Stats().Evictions)
	require.Zero(t, e.CachedPrefix(chainA))
	require.Equal(t, 6, e.CachedPrefix(last))
	recent := e.RecentPrefixes(100)
	require.Equal(t, summaryKeys(last, 5, 3, 1, 0), recent[:4])
	for _, h := range chainA {
		require.NotContains(t, recent, h)
	}
	for _, h := range recent {
		require.Equal(t, 1, e.CachedPrefix([]kvcache.Hash{h}), "RecentPrefixes returned a key the index lost")
	}
}

func TestPrefixDirectoryConcurrentReaders(t *testing.T) {
	e := startEngine(t, newFakeExec(48, 16, 4096), DefaultConfig())
	shared := prompt(64, 0)
	chain := kvcache.HashChain(shared, e.BlockSize())
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 4 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := e.CachedPrefix(chain)
				require.GreaterOrEqual(t, n, 0)
				require.LessOrEqual(t, n, len(chain))
				keys := e.RecentPrefixes(16)
				require.LessOrEqual(t, len(keys), 16)
				seen := map[kvcache.Hash]bool{}
				for _, k := range keys {
					require.False(t, seen[k], "duplicate key")
					seen[k] = true
				}
			}
		})
	}
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Go(func() {
			p := append(append([]int32{}, shared...), prompt(20+i*3, 5000+i*100)...)
			runRequest(t, e, fmt.Sprint("r", i), p, 8)
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	require.Positive(t, e.CachedPrefix(chain))
}

func TestPrefixDirRecentListIsBounded(t *testing.T) {
	d := newPrefixDir(8, 3)
	h := func(i int) kvcache.Hash { return kvcache.Hash{Hi: uint64(i)} }
	for i := range 5 {
		d.HashAdded(h(i))
	}
	d.notePrompt([]kvcache.Hash{h(0)})
	d.notePrompt([]kvcache.Hash{h(1), h(2)})
	require.Equal(t, []kvcache.Hash{h(2), h(1), h(0)}, d.recentPrefixes(10))
	d.notePrompt([]kvcache.Hash{h(0)}) // touched: to the front
	require.Equal(t, []kvcache.Hash{h(0), h(2), h(1)}, d.recentPrefixes(10))
	d.notePrompt([]kvcache.Hash{h(3)}) // full: the least recent (1) goes
	require.Equal(t, []kvcache.Hash{h(3), h(0), h(2)}, d.recentPrefixes(10))
	d.HashRemoved(h(0))
	require.Equal(t, []kvcache.Hash{h(3), h(2)}, d.recentPrefixes(10))
	d.HashAdded(h(0)) // committed again: listed again
	require.Equal(t, []kvcache.Hash{h(3), h(0)}, d.recentPrefixes(2))
}

func TestSummaryDepths(t *testing.T) {
	for n, want := range map[int][]int{
		0:  nil,
		1:  {0},
		2:  {1, 0},
		4:  {3, 1, 0},
		6:  {5, 3, 1, 0},
		8:  {7, 3, 1, 0},
		9:  {8, 7, 3, 1, 0},
		16: {15, 7, 3, 1, 0},
	} {
		chain := make([]kvcache.Hash, n)
		for i := range chain {
			chain[i] = kvcache.Hash{Hi: uint64(i)}
			chain[i].Lo = 1
		}
		d := newPrefixDir(n, recentPrefixCap)
		for _, h := range chain {
			d.HashAdded(h)
		}
		d.notePrompt(chain)
		var got []int
		for _, h := range d.recentPrefixes(100) {
			got = append(got, int(h.Hi))
		}
		require.Equal(t, want, got, "%d blocks", n)
	}
}

// BenchmarkCachedPrefix is the cost of one CachedPrefix call on a 64-block
// chain that the cache holds in full (the most lookups a call makes for it).
func BenchmarkCachedPrefix(b *testing.B) {
	const blocks, bs = 64, 16
	e, err := New(newFakeExec(256, bs, 1<<20), RealClock{}, DefaultConfig(), nil)
	if err != nil {
		b.Fatal(err)
	}
	// No step loop runs: the benchmark drives the pool itself.
	pool := e.sched.Pool()
	chain := kvcache.HashChain(prompt(blocks*bs, 0), bs)
	for _, h := range chain {
		blk, err := pool.Allocate()
		if err != nil {
			b.Fatal(err)
		}
		pool.Commit(blk, h)
		pool.Release(blk)
	}
	b.ReportAllocs()
	for b.Loop() {
		if e.CachedPrefix(chain) != blocks {
			b.Fatal("miss")
		}
	}
}
