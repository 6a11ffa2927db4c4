package tokenizer

import (
	"encoding/binary"
	"strings"
	"testing"
	"unicode/utf8"
)

// tokHasSpecialText reports whether s contains the text of a token that
// Encode matches literally; such text does not survive Decode.
func tokHasSpecialText(tk *Tokenizer, s string) bool {
	for _, id := range tk.specials {
		if strings.Contains(s, tk.tokens[id]) {
			return true
		}
	}
	return false
}

// FuzzTokenizerEncode checks, on any input, that encoding never panics and
// gives ids in range, that byte-level BPE round-trips any text without
// special-token text (invalid UTF-8 included), that SentencePiece with
// byte fallback round-trips text without ▁ or special-token text, and that
// a Detokenizer fed the ids gives Decode's text.
func FuzzTokenizerEncode(f *testing.F) {
	for _, s := range []string{
		"", " ", "Hello world", "I'm here, they'll see.\n\n  x", "12345678901", "<|eot_id|>hi<|im_start|>",
		"café 中文 🤖", "\xff\xfe\xc3", "\t\r\n \u00a0\u3000", "'S'LL'Re", "</s><s><unk>",
	} {
		f.Add(s)
	}
	bpe, spm := tokTestBuilt(f)
	tinySPM := tokTestNew(f, tokTestSPMVocab())
	tinyBPE := tokTestNew(f, tokTestBPEVocab("llama-bpe"))
	f.Fuzz(func(t *testing.T, s string) {
		for _, tk := range []*Tokenizer{bpe, spm, tinySPM, tinyBPE} {
			for _, addSpecial := range []bool{false, true} {
				ids := tk.Encode(s, addSpecial)
				for _, id := range ids {
					if id < 0 || int(id) >= tk.VocabSize() {
						t.Fatalf("id %d out of range for %q", id, s)
					}
				}
				d := NewDetokenizer(tk)
				var b strings.Builder
				for _, id := range ids {
					b.WriteString(d.Add(id))
				}
				b.WriteString(d.Flush())
				got := tk.Decode(ids)
				if b.String() != got {
					t.Fatalf("detokenizer %q != decode %q", b.String(), got)
				}
				if tokHasSpecialText(tk, s) {
					continue
				}
				switch {
				case tk == bpe || tk == tinyBPE:
					if got != s {
						t.Fatalf("bpe round trip %q -> %v -> %q", s, ids, got)
					}
				case tk == spm && addSpecial && !strings.Contains(s, spmSpace):
					if got != s {
						t.Fatalf("spm round trip %q -> %v -> %q", s, ids, got)
					}
				}
			}
		}
	})
}

// FuzzTokenizerDecode feeds arbitrary ids, in range or not: Decode and the
// Detokenizer never panic and agree, and no Add cuts a valid UTF-8
// character of the whole text in two.
func FuzzTokenizerDecode(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0xe4, 0, 0, 0, 0xb8, 0, 0, 0, 0xad, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0})
	f.Add([]byte{})
	bpe, spm := tokTestBuilt(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		ids := make([]int32, 0, len(data)/4)
		for len(data) >= 4 {
			v := int32(binary.LittleEndian.Uint32(data))
			if v >= 0 {
				v %= 1100 // mostly in range of the 1000-token vocabularies
			}
			ids = append(ids, v)
			data = data[4:]
		}
		for _, tk := range []*Tokenizer{bpe, spm} {
			d := NewDetokenizer(tk)
			var b strings.Builder
			var cuts []int
			for _, id := range ids {
				b.WriteString(d.Add(id))
				cuts = append(cuts, b.Len())
				_ = tk.DecodeToken(id)
				_ = tk.Token(id)
				_ = tk.IsEndOfGeneration(id)
			}
			if rest := d.Flush(); len(rest) > 3 {
				t.Fatalf("Flush returned %q", rest)
			} else {
				b.WriteString(rest)
			}
			text := b.String()
			if got := tk.Decode(ids); got != text {
				t.Fatalf("detokenizer %q != decode %q", text, got)
			}
			inside := make([]bool, len(text)+1) // inside[p]: p falls within a valid multi-byte character
			for i := 0; i < len(text); {
				r, w := utf8.DecodeRuneInString(text[i:])
				if r != utf8.RuneError || w > 1 {
					for j := i + 1; j < i+w; j++ {
						inside[j] = true
					}
				}
				i += w
			}
			for _, c := range cuts {
				if inside[c] {
					t.Fatalf("an Add ended inside a character of %q at %d", text, c)
				}
			}
		}
	})
}

// FuzzTokenizerVocab builds tokenizers from hostile vocabularies: any
// tokens, types, scores, merges and ids. Construction returns an error or
// a tokenizer, never panics, and the tokenizer encodes and decodes
// without panicking.
func FuzzTokenizerVocab(f *testing.F) {
	f.Add("a\nb\nab\n<0x41>\n<|x|>", "a b\nab c", []byte{1, 1, 1, 6, 3}, uint8(0), int8(4), "ab<|x|>A")
	f.Add("\n\n", "", []byte{}, uint8(1), int8(-1), "")
	f.Add("h\ne\nhe\n▁he\n▁", "h e", []byte{2, 1, 1, 1, 1}, uint8(0), int8(0), "he he\xff")
	f.Add("Ġ\nw\nĠw", "Ġ w\nĠ  w", []byte{1, 1, 1}, uint8(1), int8(2), " w")
	f.Fuzz(func(t *testing.T, tokens, merges string, types []byte, model uint8, special int8, text string) {
		v := Vocab{
			Tokens: strings.Split(tokens, "\n"),
			BOS:    int32(special), EOS: int32(special) + 1, EOT: -1, EOM: -1, UNK: int32(special) - 1, PAD: -1,
			AddBOS: special%2 == 0, AddEOS: special%3 == 0, AddSpacePrefix: true,
		}
		if merges != "" {
			v.Merges = strings.Split(merges, "\n")
		}
		if len(types) > 0 {
			v.Types = make([]int32, len(v.Tokens))
			v.Scores = make([]float32, len(v.Tokens))
			for i := range v.Types {
				v.Types[i] = int32(types[i%len(types)] % 8)
				v.Scores[i] = -float32(types[(i+1)%len(types)])
			}
		}
		pres := []string{"llama-bpe", "qwen2", "gpt-2", "default"}
		if model%2 == 0 {
			v.Model = "llama"
		} else {
			v.Model, v.Pre = "gpt2", pres[int(model/2)%len(pres)]
		}
		tk, err := NewFromVocab(v)
		if err != nil {
			if tk != nil {
				t.Fatal("tokenizer and error")
			}
			return
		}
		ids := tk.Encode(text, true)
		for _, id := range ids {
			if id < 0 || int(id) >= tk.VocabSize() {
				t.Fatalf("id %d out of range", id)
			}
		}
		_ = tk.Decode(append(ids, -1, int32(tk.VocabSize())))
		if _, err := New(tokTestMetadata(v.Metadata())); err != nil && v.BOS >= 0 {
			t.Fatalf("metadata of a valid vocabulary refused: %v", err)
		}
	})
}
