package grammar

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"slices"
	"sync"
)

// maxTokenBytes bounds the tokens a grammar can produce; longer ones (none
// in real vocabularies) are never allowed.
const maxTokenBytes = 1024

// DefaultCacheSize is how many compiled grammars a Vocabulary keeps.
const DefaultCacheSize = 64

// maxAutomaton is the automaton size (nodes plus sets) past which a cached
// grammar is dropped from the cache, so that the next request starts a
// fresh one; matchers already running keep theirs.
const maxAutomaton = 1 << 21

// Vocabulary is a model's tokens as bytes, for matching grammars against
// them. It holds a trie of the tokens' bytes and a cache of the grammars
// compiled for it, keyed by their text.
//
// Locking: safe for concurrent use.
type Vocabulary struct {
	tokens [][]byte
	eos    []int32
	words  int

	trieOnce sync.Once
	trie     trie

	mu    sync.Mutex
	cache map[[32]byte]*list.Element
	lru   list.List // of *cacheEntry, most recent first
	limit int
}

type cacheEntry struct {
	key [32]byte
	b   *Bound
}

// NewVocabulary returns the vocabulary of a model whose token id i decodes
// to tokens[i]. A nil or empty entry marks a token a grammar never allows
// (control tokens, unused ids); eos are the tokens that end a generation,
// allowed exactly where the grammar may end. The slices are kept; do not
// change them.
func NewVocabulary(tokens [][]byte, eos []int32) *Vocabulary {
	return &Vocabulary{
		tokens: tokens, eos: slices.Clone(eos), words: (len(tokens) + 63) / 64,
		cache: map[[32]byte]*list.Element{}, limit: DefaultCacheSize,
	}
}

// Size is the number of token ids.
func (v *Vocabulary) Size() int { return len(v.tokens) }

// MaskWords is the length of a token mask: one bit per token id, token t
// at bit t%64 of word t/64.
func (v *Vocabulary) MaskWords() int { return v.words }

// Token returns the bytes of token id t (nil if out of range or never
// allowed).
func (v *Vocabulary) Token(t int32) []byte {
	if t < 0 || int(t) >= len(v.tokens) {
		return nil
	}
	return v.tokens[t]
}

func (v *Vocabulary) isEOS(t int32) bool { return slices.Contains(v.eos, t) }

// Bind compiles src (GBNF) for this vocabulary, or returns the grammar
// compiled earlier from the same text.
func (v *Vocabulary) Bind(src string) (*Bound, error) {
	key := sha256.Sum256([]byte(src))
	v.mu.Lock()
	if e, ok := v.cache[key]; ok {
		ent := e.Value.(*cacheEntry)
		if ent.b.big() {
			v.lru.Remove(e)
			delete(v.cache, key)
		} else {
			v.lru.MoveToFront(e)
			v.mu.Unlock()
			return ent.b, nil
		}
	}
	v.mu.Unlock()

	g, err := Compile(src)
	if err != nil {
		return nil, err
	}
	b := v.BindGrammar(g)

	v.mu.Lock()
	defer v.mu.Unlock()
	if e, ok := v.cache[key]; ok { // compiled meanwhile by another caller
		v.lru.MoveToFront(e)
		return e.Value.(*cacheEntry).b, nil
	}
	v.cache[key] = v.lru.PushFront(&cacheEntry{key: key, b: b})
	for v.lru.Len() > v.limit {
		last := v.lru.Back()
		v.lru.Remove(last)
		delete(v.cache, last.Value.(*cacheEntry).key)
	}
	return b, nil
}

// BindGrammar binds a compiled grammar to the vocabulary, uncached.
func (v *Vocabulary) BindGrammar(g *Grammar) *Bound {
	v.trieOnce.Do(v.buildTrie)
	return &Bound{g: g, v: v, a: newAutomaton(g), pos: map[int32]*posCache{}}
}

// trie holds the tokens' bytes in a trie laid out in depth-first preorder:
// node 0 is the root (the empty prefix), a node's subtree is the nodes
// from it up to end, and its first child, if any, is the next node.
type trie struct {
	byt    []byte // the byte on the edge into the node
	depth  []uint16
	end    []int32 // one past the node's subtree
	parent []int32
	// The tokens whose bytes end at node i are toks[tokAt[i]:tokAt[i+1]].
	tokAt []int32
	toks  []int32
}

func (v *Vocabulary) buildTrie() {
	ids := make([]int32, 0, len(v.tokens))
	for i, t := range v.tokens {
		if len(t) > 0 && len(t) <= maxTokenBytes && !v.isEOS(int32(i)) {
			ids = append(ids, int32(i))
		}
	}
	slices.SortFunc(ids, func(a, b int32) int {
		if c := bytes.Compare(v.tokens[a], v.tokens[b]); c != 0 {
			return c
		}
		return int(a - b)
	})
	t := &v.trie
	t.byt, t.depth, t.end, t.parent, t.tokAt = append(t.byt, 0), append(t.depth, 0), append(t.end, 0), append(t.parent, -1), append(t.tokAt, 0)
	path := []int32{0} // path[d] is the node at depth d on the current branch
	var prev []byte
	for _, id := range ids {
		tok := v.tokens[id]
		common := 0
		for common < len(prev) && common < len(tok) && prev[common] == tok[common] {
			common++
		}
		for len(path)-1 > common { // close the nodes below the common prefix
			n := path[len(path)-1]
			t.end[n] = int32(len(t.byt))
			path = path[:len(path)-1]
		}
		for d := common; d < len(tok); d++ {
			n := int32(len(t.byt))
			t.byt = append(t.byt, tok[d])
			t.depth = append(t.depth, uint16(d+1))
			t.end = append(t.end, 0)
			t.parent = append(t.parent, path[len(path)-1])
			t.tokAt = append(t.tokAt, int32(len(t.toks)))
			path = append(path, n)
		}
		t.toks = append(t.toks, id)
		prev = tok
	}
	for _, n := range path {
		t.end[n] = int32(len(t.byt))
	}
	t.tokAt = append(t.tokAt, int32(len(t.toks)))
}

// tokens returns the ids whose bytes end at node n.
func (t *trie) tokens(n int32) []int32 { return t.toks[t.tokAt[n]:t.tokAt[n+1]] }

// prefix appends the bytes from the root to node n to dst.
func (t *trie) prefix(dst []byte, n int32) []byte {
	start := len(dst)
	for ; n > 0; n = t.parent[n] {
		dst = append(dst, t.byt[n])
	}
	slices.Reverse(dst[start:])
	return dst
}
