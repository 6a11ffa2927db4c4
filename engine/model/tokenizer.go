package model

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Token types as stored in tokenizer.ggml.token_type (gguf-py TokenType;
// llama.cpp treats any other value as undefined).
const (
	TokenTypeUndefined   = 0
	TokenTypeNormal      = 1
	TokenTypeUnknown     = 2
	TokenTypeControl     = 3
	TokenTypeUserDefined = 4
	TokenTypeUnused      = 5
	TokenTypeByte        = 6
)

// Tokenizer metadata keys (gguf-py Keys.Tokenizer). The misspelling of
// "seperator" is the real key.
const (
	tokKeyModel          = "tokenizer.ggml.model"
	tokKeyPre            = "tokenizer.ggml.pre"
	tokKeyTokens         = "tokenizer.ggml.tokens"
	tokKeyScores         = "tokenizer.ggml.scores"
	tokKeyTypes          = "tokenizer.ggml.token_type"
	tokKeyMerges         = "tokenizer.ggml.merges"
	tokKeyBOS            = "tokenizer.ggml.bos_token_id"
	tokKeyEOS            = "tokenizer.ggml.eos_token_id"
	tokKeyEOT            = "tokenizer.ggml.eot_token_id"
	tokKeyEOM            = "tokenizer.ggml.eom_token_id"
	tokKeyUNK            = "tokenizer.ggml.unknown_token_id"
	tokKeySEP            = "tokenizer.ggml.seperator_token_id"
	tokKeyPAD            = "tokenizer.ggml.padding_token_id"
	tokKeyAddBOS         = "tokenizer.ggml.add_bos_token"
	tokKeyAddEOS         = "tokenizer.ggml.add_eos_token"
	tokKeyAddSpacePrefix = "tokenizer.ggml.add_space_prefix"
)

// tokMaxVocab bounds the number of tokens; tokMaxMerges the number of BPE
// merges (Llama 3 has 280147 merges for 128256 tokens).
const (
	tokMaxVocab  = 1 << 22
	tokMaxMerges = 1 << 23
)

// ErrUnsupportedTokenizer is returned (wrapped) for a tokenizer model or
// pre-tokenizer this package does not implement.
var ErrUnsupportedTokenizer = errors.New("model: unsupported tokenizer")

// VocabError reports tokenizer metadata that cannot be used: a missing key,
// arrays of different lengths, an id out of range, a malformed merge.
type VocabError struct {
	// Key is the metadata key, e.g. "tokenizer.ggml.merges".
	Key string
	// Index is the array element at fault, or -1.
	Index int
	// Reason says what is wrong.
	Reason string
}

func (e *VocabError) Error() string {
	if e.Index >= 0 {
		return fmt.Sprintf("model: %s[%d]: %s", e.Key, e.Index, e.Reason)
	}
	return fmt.Sprintf("model: %s: %s", e.Key, e.Reason)
}

func tokVocabErr(key string, index int, format string, args ...any) error {
	return &VocabError{Key: key, Index: index, Reason: fmt.Sprintf(format, args...)}
}

// tokQuote quotes a string from a model file for an error message,
// truncated so a hostile file cannot produce a huge error.
func tokQuote(s string) string {
	const limit = 48
	if len(s) > limit {
		return fmt.Sprintf("%q...", s[:limit])
	}
	return fmt.Sprintf("%q", s)
}

// Vocab is a tokenizer vocabulary as plain data: what the tokenizer.ggml.*
// keys hold. Token ids are indexes into Tokens; an id field set to -1 means
// none. NewTokenizerFromVocab builds a Tokenizer from it; Metadata turns it
// into GGUF key/values.
type Vocab struct {
	// Model is "llama" (SentencePiece-style, merged by score) or "gpt2"
	// (byte-level BPE, merged by rank).
	Model string
	// Pre names the pre-tokenizer of a gpt2 vocabulary: "llama-bpe" (or
	// "llama3", "llama-v3"), "qwen2", "gpt-2" or "default" (also when empty).
	Pre    string
	Tokens []string
	// Scores has one score per token, or is nil (all zero). SentencePiece
	// merges the adjacent pair whose merged piece has the highest score.
	Scores []float32
	// Types has one TokenType* value per token, or is nil (all normal).
	Types []int32
	// Merges are the BPE merges "A B", highest priority first.
	Merges []string

	BOS, EOS, EOT, EOM, UNK, PAD int32

	// AddBOS and AddEOS say whether Encode with addSpecial adds BOS and EOS.
	AddBOS, AddEOS bool
	// AddSpacePrefix (SentencePiece only) prefixes each text run with a
	// space, as SentencePiece's add_dummy_prefix does.
	AddSpacePrefix bool
}

// Metadata returns the vocabulary as GGUF metadata under the
// tokenizer.ggml.* keys, with the value types gguf-py writes: string,
// []string, []float32, []int32, uint32 ids and bools. Ids of -1 and empty
// optional arrays are left out. The slices are shared with v.
func (v Vocab) Metadata() map[string]any {
	m := map[string]any{
		tokKeyModel:  v.Model,
		tokKeyTokens: v.Tokens,
		tokKeyAddBOS: v.AddBOS,
		tokKeyAddEOS: v.AddEOS,
	}
	if v.Pre != "" {
		m[tokKeyPre] = v.Pre
	}
	if v.Scores != nil {
		m[tokKeyScores] = v.Scores
	}
	if v.Types != nil {
		m[tokKeyTypes] = v.Types
	}
	if v.Model == "gpt2" || len(v.Merges) > 0 {
		m[tokKeyMerges] = tokNonNil(v.Merges)
	}
	if v.Model == "llama" {
		m[tokKeyAddSpacePrefix] = v.AddSpacePrefix
	}
	for _, kv := range []struct {
		key string
		id  int32
	}{{tokKeyBOS, v.BOS}, {tokKeyEOS, v.EOS}, {tokKeyEOT, v.EOT}, {tokKeyEOM, v.EOM}, {tokKeyUNK, v.UNK}, {tokKeyPAD, v.PAD}} {
		if kv.id >= 0 {
			m[kv.key] = uint32(kv.id)
		}
	}
	return m
}

func tokNonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

type tokModel uint8

const (
	tokModelSPM tokModel = iota + 1
	tokModelBPE
)

// Tokenizer turns text into token ids and back for one vocabulary, the way
// llama.cpp does: SentencePiece-style (tokenizer.ggml.model "llama") or
// byte-level BPE ("gpt2"). It is immutable and safe for concurrent use.
type Tokenizer struct {
	model    tokModel
	modelStr string
	preStr   string
	pre      pretokKind

	tokens []string
	scores []float32 // nil: all zero
	types  []int32   // after llama.cpp's end-of-generation overrides
	ids    map[string]int32
	merges map[string]int32 // "A B" -> rank

	// pieces[id] is the text id stands for: ▁ unescaped (SPM), the GPT-2
	// byte map undone (BPE), the byte of a byte token, the text of a
	// control or user-defined token, "" for unused and undefined ones.
	pieces []string
	// byteTok maps a byte to its fallback token (SPM <0xNN>), or -1.
	byteTok [256]int32

	// specials are the control, user-defined and unknown tokens matched
	// literally in text, longest first; specialsByFirst indexes them by
	// their first byte.
	specials        []int32
	specialsByFirst [256][]int32

	bos, eos, eot, eom, unk, pad int32
	addBOS, addEOS               bool
	addSpacePrefix               bool
	ignoreMerges                 bool
	spmWords                     bool    // see spmEncode
	eog                          []int32 // sorted
}

// tokEOTTexts are the texts llama.cpp takes for the end-of-turn token when
// the file names none, in order of preference.
var tokEOTTexts = []string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
	"<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<end_of_utterance>",
}

// tokEOGTexts are the token texts llama.cpp treats as end of generation
// (and as control tokens) whatever the file says.
var tokEOGTexts = []string{
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
	"<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
	"<|end_of_text|>", "<end_of_utterance>",
}

// tokFIMEOGTexts are fill-in-the-middle pad, repo and file-separator
// tokens, which llama.cpp also treats as end of generation.
var tokFIMEOGTexts = []string{
	"<|fim_pad|>", "<fim-pad>", "<PAD>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<|file_sep|>",
}

// NewTokenizer builds a tokenizer from a model file's tokenizer.ggml.* keys.
// Everything is checked, since model files are untrusted: arrays of equal
// length, ids in range, well-formed merges, at most 1<<22 tokens. Defaults
// follow llama.cpp: for "llama" BOS 1, EOS 2, UNK 0, add_bos and
// add_space_prefix true; for "gpt2" no BOS or EOS, and add_bos true for the
// Llama 3 pre-tokenizer. Errors are *VocabError or wrap
// ErrUnsupportedTokenizer.
func NewTokenizer(md Metadata) (*Tokenizer, error) {
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
	default:
		return nil, fmt.Errorf("%w: %s %s", ErrUnsupportedTokenizer, tokKeyModel, tokQuote(v.Model))
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
	return NewTokenizerFromVocab(v)
}

// tokHasKey reports whether md holds key with any type.
func tokHasKey(md Metadata, key string) bool {
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
func tokReadID(md Metadata, key string, n int) (int32, bool, error) {
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

// NewTokenizerFromVocab builds a tokenizer from plain data, checking it as
// NewTokenizer does. The slices in v are kept, not copied, and must not be
// modified afterwards.
func NewTokenizerFromVocab(v Vocab) (*Tokenizer, error) {
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
	default:
		return nil, fmt.Errorf("%w: %s %s", ErrUnsupportedTokenizer, tokKeyModel, tokQuote(v.Model))
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
			if t.model == tokModelSPM {
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

// tokFragment is a run of raw text [start, end) or, with id >= 0, a special
// token matched in the text.
type tokFragment struct {
	id         int32
	start, end int
}

// tokPartition splits text into raw runs and literal special tokens the
// way llama.cpp does: each special token in turn, longest first, is cut out
// of every raw run that remains.
func (t *Tokenizer) tokPartition(text string) []tokFragment {
	if text == "" {
		return nil
	}
	frags := []tokFragment{{id: -1, start: 0, end: len(text)}}
	present := t.tokSpecialsIn(text)
	for _, id := range present {
		tok := t.tokens[id]
		var next []tokFragment
		for _, f := range frags {
			if f.id >= 0 {
				next = append(next, f)
				continue
			}
			start := f.start
			for {
				i := strings.Index(text[start:f.end], tok)
				if i < 0 {
					break
				}
				i += start
				if i > start {
					next = append(next, tokFragment{id: -1, start: start, end: i})
				}
				next = append(next, tokFragment{id: id})
				start = i + len(tok)
			}
			if start < f.end {
				next = append(next, tokFragment{id: -1, start: start, end: f.end})
			}
		}
		frags = next
	}
	return frags
}

// tokSpecialsIn returns the special tokens that occur in text, in the
// order of t.specials.
func (t *Tokenizer) tokSpecialsIn(text string) []int32 {
	if len(t.specials) == 0 {
		return nil
	}
	var found map[int32]bool
	for i := 0; i < len(text); i++ {
		cands := t.specialsByFirst[text[i]]
		for _, id := range cands {
			if strings.HasPrefix(text[i:], t.tokens[id]) {
				if found == nil {
					found = map[int32]bool{}
				}
				found[id] = true
			}
		}
	}
	if len(found) == 0 {
		return nil
	}
	out := make([]int32, 0, len(found))
	for _, id := range t.specials {
		if found[id] {
			out = append(out, id)
		}
	}
	return out
}

// Encode turns text into token ids. Control, user-defined and unknown
// tokens that appear literally in text (as in a rendered chat prompt) become
// their single ids. With addSpecial, BOS and EOS are added where the
// vocabulary says so (AddBOS, and add_eos_token). Any input is accepted,
// including invalid UTF-8, which byte-level BPE and byte fallback keep.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int32 {
	out := make([]int32, 0, len(text)/3+2)
	if addSpecial && t.addBOS {
		out = append(out, t.bos)
	}
	frags := t.tokPartition(text)
	switch t.model {
	case tokModelSPM:
		var sc spmScratch
		prevSpecial := true // llama.cpp: a space prefix for the first run and after a special token
		for _, f := range frags {
			if f.id >= 0 {
				out = append(out, f.id)
				prevSpecial = true
				continue
			}
			out = t.spmEncode(text[f.start:f.end], t.addSpacePrefix && prevSpecial, out, &sc)
			prevSpecial = false
		}
	case tokModelBPE:
		var sc bpeScratch
		for _, f := range frags {
			if f.id >= 0 {
				out = append(out, f.id)
				continue
			}
			out = t.bpeEncode(text[f.start:f.end], out, &sc)
		}
	}
	if addSpecial && t.addEOS {
		out = append(out, t.eos)
	}
	return out
}

// Decode turns token ids into text. Control, unknown and unused tokens
// produce nothing; user-defined tokens produce their text; ids out of range
// are skipped. For a SentencePiece vocabulary with add_space_prefix, the
// space the encoder put in front of the text is dropped when ids start
// with BOS. Decode(ids) equals what a Detokenizer fed the same ids returns
// in total.
func (t *Tokenizer) Decode(ids []int32) string {
	d := NewDetokenizer(t)
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(d.Add(id))
	}
	b.WriteString(d.Flush())
	return b.String()
}

// DecodeToken returns the text of one token: ▁ becomes a space, the GPT-2
// byte map is undone, a byte token gives its byte (so the result may be an
// incomplete UTF-8 sequence), and control tokens give their text (unlike
// Decode). Unused tokens and ids out of range give "".
func (t *Tokenizer) DecodeToken(id int32) string {
	if id < 0 || int(id) >= len(t.pieces) {
		return ""
	}
	return t.pieces[id]
}

// tokHidden reports whether Decode leaves id out.
func (t *Tokenizer) tokHidden(id int32) bool {
	switch t.types[id] {
	case TokenTypeControl, TokenTypeUnknown:
		return true
	}
	return false
}

// VocabSize returns the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// Model returns tokenizer.ggml.model: "llama" or "gpt2".
func (t *Tokenizer) Model() string { return t.modelStr }

// Pre returns tokenizer.ggml.pre as given (possibly "").
func (t *Tokenizer) Pre() string { return t.preStr }

// BOS returns the beginning-of-sequence id, if the vocabulary has one.
func (t *Tokenizer) BOS() (int32, bool) { return t.bos, t.bos >= 0 }

// EOS returns the end-of-sequence id, or -1.
func (t *Tokenizer) EOS() int32 { return t.eos }

// AddBOS reports whether Encode with addSpecial puts BOS first. A chat
// template that writes the BOS text itself needs Encode without addSpecial,
// or BOS appears twice.
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// AddEOS reports whether Encode with addSpecial puts EOS last.
func (t *Tokenizer) AddEOS() bool { return t.addEOS }

// IsEndOfGeneration reports whether generation stops at id: eos, eot, eom
// or a token such as <|eot_id|>, <|im_end|>, <|endoftext|>, </s>.
func (t *Tokenizer) IsEndOfGeneration(id int32) bool {
	_, ok := slices.BinarySearch(t.eog, id)
	return ok
}

// EndOfGeneration returns the end-of-generation ids in increasing order.
// The caller must not modify the slice.
func (t *Tokenizer) EndOfGeneration() []int32 { return t.eog }

// Token returns the vocabulary text of id as stored (with ▁ or the GPT-2
// byte map), or "" for an id out of range.
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// TokenID returns the id of a vocabulary text as stored.
func (t *Tokenizer) TokenID(piece string) (int32, bool) {
	id, ok := t.ids[piece]
	return id, ok
}

// TokenType returns the TokenType* value of id (after llama.cpp's
// overrides, which make end-of-generation tokens control tokens), or
// TokenTypeUndefined for an id out of range.
func (t *Tokenizer) TokenType(id int32) int32 {
	if id < 0 || int(id) >= len(t.types) {
		return TokenTypeUndefined
	}
	return t.types[id]
}

// tokBigram is a candidate merge of two adjacent symbols, valid while both
// still have the lengths they had when it was queued (lengths only grow).
// key orders candidates: the smallest comes out first.
type tokBigram struct {
	key         uint64
	left, right int32
	ln, rn      int32
}

// tokHeap is a binary min-heap of merge candidates by key.
type tokHeap []tokBigram

func (h *tokHeap) push(x tokBigram) {
	s := append(*h, x)
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p].key <= x.key {
			break
		}
		s[i] = s[p]
		i = p
	}
	s[i] = x
	*h = s
}

func (h *tokHeap) pop() tokBigram {
	s := *h
	top := s[0]
	last := len(s) - 1
	x := s[last]
	s = s[:last]
	n := len(s)
	i := 0
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && s[r].key < s[c].key {
			c = r
		}
		if x.key <= s[c].key {
			break
		}
		s[i] = s[c]
		i = c
	}
	if n > 0 {
		s[i] = x
	}
	*h = s
	return top
}
