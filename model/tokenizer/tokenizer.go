package tokenizer

import (
	"errors"
	"fmt"
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

// ErrUnsupported is returned (wrapped) for a tokenizer model or
// pre-tokenizer this package does not implement.
var ErrUnsupported = errors.New("model: unsupported tokenizer")

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
// none. NewFromVocab builds a Tokenizer from it; Metadata turns it
// into GGUF key/values.
type Vocab struct {
	// Model is "llama" (SentencePiece-style, merged by score), "gpt2"
	// (byte-level BPE, merged by rank) or "bert" (WordPiece, longest
	// match first).
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
	// WordPiece holds the settings of a "bert" vocabulary; nil for the
	// others.
	WordPiece *WordPiece
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
	if v.WordPiece != nil {
		v.WordPiece.metadata(m)
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
// llama.cpp does: SentencePiece-style (tokenizer.ggml.model "llama"),
// byte-level BPE ("gpt2") or WordPiece ("bert"). It is immutable and safe
// for concurrent use.
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
	wpm                          *wpmState
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
	case tokModelWPM:
		out = t.wpmEncode(text, frags, addSpecial, out)
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

// TokenBytes returns the bytes every token id decodes to, nil for the
// tokens Decode leaves out (control and unknown tokens) and unused ones:
// the vocabulary a grammar matches generated tokens against. The slices
// are fresh; the caller may keep them.
func (t *Tokenizer) TokenBytes() [][]byte {
	out := make([][]byte, len(t.pieces))
	for id, p := range t.pieces {
		if p != "" && !t.tokHidden(int32(id)) {
			out[id] = []byte(p)
		}
	}
	return out
}
