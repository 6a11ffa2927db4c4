package tokenizer

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/llmd/llmd/model/gguf"
)

// New builds a tokenizer from a model file's tokenizer.ggml.* keys
// ("llama", "gpt2" or "bert").
// Everything is checked, since model files are untrusted: arrays of equal
// length, ids in range, well-formed merges, at most 1<<22 tokens. Defaults
// follow llama.cpp: for "llama" BOS 1, EOS 2, UNK 0, add_bos and
// add_space_prefix true; for "gpt2" no BOS or EOS, and add_bos true for the
// Llama 3 pre-tokenizer. Errors are *VocabError or wrap
// ErrUnsupported.
func New(md gguf.Metadata) (*Tokenizer, error) {
	var v Vocab
	var ok bool
	if v.Model, ok = md.String(tokKeyModel); !ok {
		return nil, tokVocabErr(tokKeyModel, -1, "missing or not a string")
	}
	v.Pre, _ = md.String(tokKeyPre)
	if v.Tokens, ok = md.Strings(tokKeyTokens); !ok {
		return nil, tokVocabErr(tokKeyTokens, -1, "missing or not a string array")
	}
	n := len(v.Tokens)
	if n == 0 {
		return nil, tokVocabErr(tokKeyTokens, -1, "empty")
	}
	if s, ok := md.Float32s(tokKeyScores); ok {
		v.Scores = s
	} else if tokHasKey(md, tokKeyScores) {
		return nil, tokVocabErr(tokKeyScores, -1, "not a float32 array")
	}
	if ty, ok := md.Int32s(tokKeyTypes); ok {
		v.Types = ty
	} else if tokHasKey(md, tokKeyTypes) {
		return nil, tokVocabErr(tokKeyTypes, -1, "not an integer array")
	}
	if m, ok := md.Strings(tokKeyMerges); ok {
		v.Merges = m
	} else if tokHasKey(md, tokKeyMerges) {
		return nil, tokVocabErr(tokKeyMerges, -1, "not a string array")
	} else if v.Model == "gpt2" {
		return nil, tokVocabErr(tokKeyMerges, -1, "missing: a gpt2 vocabulary needs merges")
	}

	v.BOS, v.EOS, v.EOT, v.EOM, v.UNK, v.PAD = -1, -1, -1, -1, -1, -1
	switch v.Model {
	case "llama":
		v.BOS, v.EOS, v.UNK = 1, 2, 0
		v.AddBOS, v.AddSpacePrefix = true, true
	case "gpt2":
		kind, err := pretokKindFor(v.Pre)
		if err != nil {
			return nil, err
		}
		v.AddBOS = kind == pretokLlama3
	case "bert":
		wpmDefaults(&v, n)
	default:
		return nil, fmt.Errorf("%w: %s %s", ErrUnsupported, tokKeyModel, tokQuote(v.Model))
	}
	// Defaults that do not fit this vocabulary are dropped, not errors.
	for _, id := range []*int32{&v.BOS, &v.EOS, &v.UNK} {
		if *id >= int32(min(n, math.MaxInt32)) {
			*id = -1
		}
	}
	for _, s := range []struct {
		key    string
		id     *int32
		strict bool
	}{
		{tokKeyBOS, &v.BOS, true}, {tokKeyEOS, &v.EOS, true}, {tokKeyEOT, &v.EOT, true},
		{tokKeyEOM, &v.EOM, true}, {tokKeyUNK, &v.UNK, false}, {tokKeyPAD, &v.PAD, false},
	} {
		id, present, err := tokReadID(md, s.key, n)
		switch {
		case err != nil && s.strict:
			return nil, err
		case err != nil:
			// llama.cpp warns and keeps its default for a bad id; the
			// unknown and padding ids are not worth refusing a model for.
		case present:
			*s.id = id
		}
	}
	for _, b := range []struct {
		key string
		val *bool
	}{{tokKeyAddBOS, &v.AddBOS}, {tokKeyAddEOS, &v.AddEOS}, {tokKeyAddSpacePrefix, &v.AddSpacePrefix}} {
		if x, ok := md.Bool(b.key); ok {
			*b.val = x
		} else if tokHasKey(md, b.key) {
			return nil, tokVocabErr(b.key, -1, "not a bool")
		}
	}
	if v.WordPiece != nil {
		if err := wpmReadKeys(md, &v, n); err != nil {
			return nil, err
		}
	}
	return NewFromVocab(v)
}

// tokHasKey reports whether md holds key with any type.
func tokHasKey(md gguf.Metadata, key string) bool {
	if _, ok := md.String(key); ok {
		return true
	}
	if _, ok := md.Uint(key); ok {
		return true
	}
	if _, ok := md.Int(key); ok {
		return true
	}
	if _, ok := md.Float(key); ok {
		return true
	}
	if _, ok := md.Bool(key); ok {
		return true
	}
	if _, ok := md.Strings(key); ok {
		return true
	}
	if _, ok := md.Float32s(key); ok {
		return true
	}
	_, ok := md.Int32s(key)
	return ok
}

// tokReadID reads a token id key and checks it against the vocabulary size.
func tokReadID(md gguf.Metadata, key string, n int) (int32, bool, error) {
	if u, ok := md.Uint(key); ok {
		if u >= uint64(n) {
			return -1, true, tokVocabErr(key, -1, "token id %d out of range for %d tokens", u, n)
		}
		return int32(u), true, nil
	}
	if i, ok := md.Int(key); ok {
		return -1, true, tokVocabErr(key, -1, "token id %d out of range for %d tokens", i, n)
	}
	if tokHasKey(md, key) {
		return -1, true, tokVocabErr(key, -1, "not an integer")
	}
	return -1, false, nil
}

// NewFromVocab builds a tokenizer from plain data, checking it as
// New does. The slices in v are kept, not copied, and must not be
// modified afterwards.
func NewFromVocab(v Vocab) (*Tokenizer, error) {
	t := &Tokenizer{modelStr: v.Model, preStr: v.Pre}
	switch v.Model {
	case "llama":
		t.model = tokModelSPM
	case "gpt2":
		t.model = tokModelBPE
		kind, err := pretokKindFor(v.Pre)
		if err != nil {
			return nil, err
		}
		t.pre = kind
		t.ignoreMerges = kind == pretokLlama3
	case "bert":
		t.model = tokModelWPM
	default:
		return nil, fmt.Errorf("%w: %s %s", ErrUnsupported, tokKeyModel, tokQuote(v.Model))
	}

	n := len(v.Tokens)
	switch {
	case n == 0:
		return nil, tokVocabErr(tokKeyTokens, -1, "empty")
	case n > tokMaxVocab:
		return nil, tokVocabErr(tokKeyTokens, -1, "%d tokens, more than the limit of %d", n, tokMaxVocab)
	case v.Scores != nil && len(v.Scores) != n:
		return nil, tokVocabErr(tokKeyScores, -1, "%d scores for %d tokens", len(v.Scores), n)
	case v.Types != nil && len(v.Types) != n:
		return nil, tokVocabErr(tokKeyTypes, -1, "%d token types for %d tokens", len(v.Types), n)
	case len(v.Merges) > tokMaxMerges:
		return nil, tokVocabErr(tokKeyMerges, -1, "%d merges, more than the limit of %d", len(v.Merges), tokMaxMerges)
	}
	for i, s := range v.Scores {
		if math.IsNaN(float64(s)) {
			return nil, tokVocabErr(tokKeyScores, i, "NaN")
		}
	}
	t.scores = v.Scores

	t.tokens = v.Tokens
	t.ids = make(map[string]int32, n)
	cloned := false
	for i, s := range v.Tokens {
		if s == "" {
			// llama.cpp renames an empty token rather than refusing it.
			if !cloned {
				t.tokens, cloned = slices.Clone(v.Tokens), true
			}
			s = fmt.Sprintf("[EMPTY_%d]", i)
			t.tokens[i] = s
		}
		if _, dup := t.ids[s]; dup {
			return nil, tokVocabErr(tokKeyTokens, i, "duplicate token %s", tokQuote(s))
		}
		t.ids[s] = int32(i)
	}

	t.types = make([]int32, n)
	for i := range t.types {
		t.types[i] = TokenTypeNormal
		if v.Types == nil {
			continue
		}
		ty := v.Types[i]
		if ty < TokenTypeUndefined || ty > TokenTypeByte {
			return nil, tokVocabErr(tokKeyTypes, i, "unknown token type %d", ty)
		}
		t.types[i] = ty
	}

	for _, id := range []struct {
		key string
		id  int32
	}{{tokKeyBOS, v.BOS}, {tokKeyEOS, v.EOS}, {tokKeyEOT, v.EOT}, {tokKeyEOM, v.EOM}, {tokKeyUNK, v.UNK}, {tokKeyPAD, v.PAD}} {
		if id.id < -1 || id.id >= int32(n) {
			return nil, tokVocabErr(id.key, -1, "token id %d out of range for %d tokens", id.id, n)
		}
	}
	t.bos, t.eos, t.eot, t.eom, t.unk, t.pad = v.BOS, v.EOS, v.EOT, v.EOM, v.UNK, v.PAD
	t.addBOS = v.AddBOS && t.bos >= 0
	t.addEOS = v.AddEOS && t.eos >= 0
	t.addSpacePrefix = v.AddSpacePrefix && t.model == tokModelSPM

	if t.model == tokModelBPE {
		t.merges = make(map[string]int32, len(v.Merges))
		for i, m := range v.Merges {
			sp := strings.IndexByte(m, ' ')
			if sp < 1 || sp == len(m)-1 || strings.IndexByte(m[sp+1:], ' ') >= 0 {
				return nil, tokVocabErr(tokKeyMerges, i, "want two pieces separated by one space, got %s", tokQuote(m))
			}
			if _, dup := t.merges[m]; !dup {
				t.merges[m] = int32(i)
			}
		}
	}

	t.spmWords = t.model == tokModelSPM && spmWordsIndependent(t.tokens)
	if t.model == tokModelWPM {
		if err := t.wpmInit(v); err != nil {
			return nil, err
		}
	}
	t.tokSetEOG()
	if err := t.tokSetPieces(); err != nil {
		return nil, err
	}
	t.tokSetSpecials()
	return t, nil
}

// tokSetEOG collects the end-of-generation ids as llama.cpp does: eos, eot
// and eom, tokens whose text marks an end of turn, and fill-in-the-middle
// pad/repo/separator tokens. Tokens found by text become control tokens.
func (t *Tokenizer) tokSetEOG() {
	control := func(id int32) {
		if t.types[id] != TokenTypeControl {
			t.types[id] = TokenTypeControl
		}
	}
	if t.eot < 0 {
		for _, s := range tokEOTTexts {
			if id, ok := t.ids[s]; ok {
				t.eot = id
				control(id)
				break
			}
		}
	}
	if t.eom < 0 {
		if id, ok := t.ids["<|eom_id|>"]; ok {
			t.eom = id
			control(id)
		}
	}
	var eog []int32
	for _, list := range [][]string{tokEOGTexts, tokFIMEOGTexts} {
		for _, s := range list {
			if id, ok := t.ids[s]; ok {
				eog = append(eog, id)
				control(id)
			}
		}
	}
	for _, id := range []int32{t.eos, t.eot, t.eom} {
		if id >= 0 {
			eog = append(eog, id)
		}
	}
	slices.Sort(eog)
	t.eog = slices.Compact(eog)
}

// tokSetPieces computes the text of every token and the byte-fallback
// table.
func (t *Tokenizer) tokSetPieces() error {
	for i := range t.byteTok {
		t.byteTok[i] = -1
	}
	t.pieces = make([]string, len(t.tokens))
	for i, s := range t.tokens {
		switch t.types[i] {
		case TokenTypeNormal:
			if t.model != tokModelBPE {
				t.pieces[i] = strings.ReplaceAll(s, spmSpace, " ")
			} else {
				t.pieces[i] = bpeUnmap(s)
			}
		case TokenTypeByte:
			b, ok := tokParseByte(s)
			if !ok && t.model == tokModelBPE {
				// A byte-level BPE byte token may be the mapped character.
				if u := bpeUnmap(s); len(u) == 1 {
					b, ok = u[0], true
				}
			}
			if !ok {
				return tokVocabErr(tokKeyTokens, i, "byte token %s is not <0xNN>", tokQuote(s))
			}
			t.pieces[i] = string([]byte{b})
			if t.byteTok[b] < 0 {
				t.byteTok[b] = int32(i)
			}
		case TokenTypeControl, TokenTypeUserDefined, TokenTypeUnknown:
			t.pieces[i] = s
		}
	}
	// llama.cpp looks byte tokens up by their text, whatever their type,
	// and falls back to a token that is the byte itself.
	for b := range 256 {
		if t.byteTok[b] >= 0 || t.model != tokModelSPM {
			continue
		}
		if id, ok := t.ids[fmt.Sprintf("<0x%02X>", b)]; ok {
			t.byteTok[b] = id
		} else if id, ok := t.ids[string([]byte{byte(b)})]; ok {
			t.byteTok[b] = id
		}
	}
	return nil
}

// tokParseByte parses "<0xNN>" (upper- or lowercase hex).
func tokParseByte(s string) (byte, bool) {
	if len(s) != 6 || s[:3] != "<0x" || s[5] != '>' {
		return 0, false
	}
	var b byte
	for _, c := range []byte(s[3:5]) {
		switch {
		case c >= '0' && c <= '9':
			b = b<<4 | (c - '0')
		case c >= 'A' && c <= 'F':
			b = b<<4 | (c - 'A' + 10)
		case c >= 'a' && c <= 'f':
			b = b<<4 | (c - 'a' + 10)
		default:
			return 0, false
		}
	}
	return b, true
}

// tokSetSpecials lists the tokens matched literally in text: control,
// user-defined and unknown ones, longest first (ties by id), as llama.cpp's
// special-token cache.
func (t *Tokenizer) tokSetSpecials() {
	for i, ty := range t.types {
		if ty == TokenTypeControl || ty == TokenTypeUserDefined || ty == TokenTypeUnknown {
			t.specials = append(t.specials, int32(i))
		}
	}
	slices.SortStableFunc(t.specials, func(a, b int32) int {
		return cmp.Compare(len(t.tokens[b]), len(t.tokens[a]))
	})
	for _, id := range t.specials {
		c := t.tokens[id][0]
		t.specialsByFirst[c] = append(t.specialsByFirst[c], id)
	}
}
