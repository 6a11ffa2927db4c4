package kvcache

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestHashChainDependsOnParent(t *testing.T) {
	a := HashChain([]int32{1, 2, 3, 4, 5, 6, 7, 8}, 4)
	b := HashChain([]int32{9, 9, 9, 9, 5, 6, 7, 8}, 4)
	require.Len(t, a, 2)
	require.NotEqual(t, a[1], b[1], "same tokens under a different prefix must hash differently")
	require.Equal(t, a, HashChain([]int32{1, 2, 3, 4, 5, 6, 7, 8, 9}, 4), "a partial block has no hash")
}

func TestNewPoolRejectsBadSizes(t *testing.T) {
	_, err := NewPool(0, 16)
	require.Error(t, err)
	_, err = NewPool(8, 12)
	require.Error(t, err)
}

// TestPoolProperties drives a Pool with random interleavings of allocate,
// fork (share), commit, release, prefix lookup and eviction, against a model
// of who holds which block. Reference counts must match the model, a block
// in use is never handed out again, and a lookup only ever returns the
// block committed under that hash.
func TestPoolProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 12).Draw(t, "blocks")
		p, err := NewPool(n, 4)
		if err != nil {
			t.Fatal(err)
		}
		mirror := &setHook{set: map[Hash]bool{}}
		p.SetIndexHook(mirror)
		refs := map[int32]int{}     // model: references held
		content := map[int32]Hash{} // model: committed hash of a block
		var held []int32            // one entry per reference held
		hashOf := func(i int) Hash { return Hash{Hi: uint64(i + 1), Lo: 7} }

		t.Repeat(map[string]func(*rapid.T){
			"allocate": func(t *rapid.T) {
				b, err := p.Allocate()
				if err != nil {
					if p.NumFree() != 0 {
						t.Fatalf("allocate failed with %d free", p.NumFree())
					}
					return
				}
				if refs[b] != 0 {
					t.Fatalf("block %d handed out while holding %d references", b, refs[b])
				}
				delete(content, b) // evicted or fresh: its old prefix is gone
				refs[b] = 1
				held = append(held, b)
			},
			"fork": func(t *rapid.T) {
				if len(held) == 0 {
					t.Skip("no block is held: this action does not apply yet")
				}
				b := held[rapid.IntRange(0, len(held)-1).Draw(t, "i")]
				p.Ref(b)
				refs[b]++
				held = append(held, b)
			},
			"commit": func(t *rapid.T) {
				if len(held) == 0 {
					t.Skip("no block is held: this action does not apply yet")
				}
				b := held[rapid.IntRange(0, len(held)-1).Draw(t, "i")]
				h := hashOf(rapid.IntRange(0, 5).Draw(t, "h"))
				taken := false
				for _, c := range content {
					taken = taken || c == h
				}
				_, already := content[b]
				ok := p.Commit(b, h)
				if !already && !taken != ok {
					t.Fatalf("commit of block %d: got %v, hash taken %v", b, ok, taken)
				}
				if ok && !already {
					content[b] = h
				}
			},
			"release": func(t *rapid.T) {
				if len(held) == 0 {
					t.Skip("no block is held: this action does not apply yet")
				}
				i := rapid.IntRange(0, len(held)-1).Draw(t, "i")
				b := held[i]
				held = append(held[:i], held[i+1:]...)
				p.Release(b)
				refs[b]--
				if refs[b] == 0 {
					delete(refs, b)
				}
			},
			"lookup": func(t *rapid.T) {
				h := hashOf(rapid.IntRange(0, 5).Draw(t, "h"))
				b, ok := p.Lookup(h)
				var want int32 = -1
				for blk, c := range content {
					if c == h {
						want = blk
					}
				}
				if ok != (want >= 0) || (ok && b != want) {
					t.Fatalf("lookup %v: got %d,%v want %d", h, b, ok, want)
				}
				if ok {
					refs[b]++
					held = append(held, b)
				}
			},
			"": func(t *rapid.T) {
				used := 0
				for b, r := range refs {
					if p.RefCount(b) != r {
						t.Fatalf("block %d: refcount %d, model %d", b, p.RefCount(b), r)
					}
					used++
				}
				if p.NumUsed() != used {
					t.Fatalf("used %d, model %d", p.NumUsed(), used)
				}
				if p.NumUsed()+p.NumFree() != n {
					t.Fatalf("used %d + free %d != %d", p.NumUsed(), p.NumFree(), n)
				}
				if len(mirror.set) != len(content) {
					t.Fatalf("index hook mirrors %d hashes, model %d", len(mirror.set), len(content))
				}
				for _, h := range content {
					if !mirror.set[h] {
						t.Fatalf("index hook lost hash %v", h)
					}
				}
			},
		})
		for _, b := range held {
			p.Release(b)
		}
		if err := p.CheckIdle(); err != nil {
			t.Fatal(err)
		}
	})
}

// setHook mirrors a pool's index as a set, failing on an impossible event.
type setHook struct{ set map[Hash]bool }

func (m *setHook) HashAdded(h Hash) {
	if m.set[h] {
		panic(fmt.Sprintf("hash %v added twice", h))
	}
	m.set[h] = true
}

func (m *setHook) HashRemoved(h Hash) {
	if !m.set[h] {
		panic(fmt.Sprintf("hash %v removed but not added", h))
	}
	delete(m.set, h)
}

// logHook records index events in order.
type logHook struct{ events []string }

func (l *logHook) HashAdded(h Hash)   { l.events = append(l.events, fmt.Sprint("+", h.Hi)) }
func (l *logHook) HashRemoved(h Hash) { l.events = append(l.events, fmt.Sprint("-", h.Hi)) }

func TestIndexHook(t *testing.T) {
	p, err := NewPool(2, 4)
	require.NoError(t, err)
	log := &logHook{}
	p.SetIndexHook(log)
	h1, h2, h3 := Hash{Hi: 1}, Hash{Hi: 2}, Hash{Hi: 3}

	a, err := p.Allocate()
	require.NoError(t, err)
	b, err := p.Allocate()
	require.NoError(t, err)
	require.True(t, p.Commit(a, h1))
	require.True(t, p.Commit(a, h1), "a second commit of the same hash is a no-op")
	require.False(t, p.Commit(b, h1), "h1 is held by another block")
	require.False(t, p.Commit(a, h2), "a already holds h1")
	require.Equal(t, []string{"+1"}, log.events, "only a commit that adds to the index fires")

	require.True(t, p.Commit(b, h2))
	p.Release(a)
	p.Release(b)
	require.Equal(t, []string{"+1", "+2"}, log.events, "releasing keeps cached blocks in the index")

	c, err := p.Allocate() // evicts a, the least recently released
	require.NoError(t, err)
	require.Equal(t, []string{"+1", "+2", "-1"}, log.events)
	require.True(t, p.Commit(c, h3))
	_, err = p.Allocate() // evicts b
	require.NoError(t, err)
	require.Equal(t, []string{"+1", "+2", "-1", "+3", "-2"}, log.events)

	// A hook set later is told of what the index already holds.
	late := &setHook{set: map[Hash]bool{}}
	p.SetIndexHook(late)
	require.Equal(t, map[Hash]bool{h3: true}, late.set)
	p.SetIndexHook(nil)
	p.Release(c)
	_, err = p.Allocate() // evicts c with no hook
	require.NoError(t, err)
	require.Equal(t, map[Hash]bool{h3: true}, late.set)
}

func TestSwapSpace(t *testing.T) {
	s, err := NewSwapSpace(2)
	require.NoError(t, err)
	a, err := s.Allocate()
	require.NoError(t, err)
	_, err = s.Allocate()
	require.NoError(t, err)
	_, err = s.Allocate()
	require.ErrorIs(t, err, ErrSwapFull)
	s.Release(a)
	require.Equal(t, 1, s.NumFree())
}

func BenchmarkPrefixLookup(b *testing.B) {
	const tokens, bs = 32 << 10, 16
	p, err := NewPool(tokens/bs+1, bs)
	if err != nil {
		b.Fatal(err)
	}
	prompt := make([]int32, tokens)
	for i := range prompt {
		prompt[i] = int32(i * 7)
	}
	for _, h := range HashChain(prompt, bs) {
		blk, _ := p.Allocate()
		p.Commit(blk, h)
		p.Release(blk)
	}
	b.ReportAllocs()
	for b.Loop() {
		hashes := HashChain(prompt, bs)
		for _, h := range hashes {
			if found, _ := p.Probe(h); !found {
				b.Fatal("miss")
			}
		}
	}
	b.ReportMetric(float64(tokens), "tokens/op")
}
