package tokenizer

import (
	"fmt"
	"strings"
	"testing"
)

// tokBenchText returns about tokens tokens of English-like text for tk.
func tokBenchText(tk *Tokenizer, tokens int) string {
	var b strings.Builder
	for len(tk.Encode(b.String(), false)) < tokens {
		for range 50 {
			b.WriteString(vocabCorpus)
		}
	}
	return b.String()
}

func benchEncode(b *testing.B, tk *Tokenizer, text string) {
	b.Helper()
	n := len(tk.Encode(text, true))
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		tk.Encode(text, true)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/token")
}

// BenchmarkTokenizerEncode encodes about 32k tokens of text.
func BenchmarkTokenizerEncode(b *testing.B) {
	bpe, spm := tokTestBuilt(b)
	for _, c := range []struct {
		name string
		tk   *Tokenizer
	}{{"built-bpe", bpe}, {"built-spm", spm}} {
		b.Run("vocab="+c.name, func(b *testing.B) { benchEncode(b, c.tk, tokBenchText(c.tk, 32000)) })
	}
	for _, name := range []string{tokFixtureSPM, tokFixtureLlama3, tokFixtureQwen2} {
		b.Run("vocab="+strings.TrimSuffix(name, ".gguf"), func(b *testing.B) {
			tk := tokFixture(b, name)
			benchEncode(b, tk, tokBenchText(tk, 32000))
		})
	}
}

// BenchmarkTokenizerEncodeLongPiece encodes 100 KB that the pre-tokenizer
// leaves as one piece (or SentencePiece as one run), the worst case for
// merging.
func BenchmarkTokenizerEncodeLongPiece(b *testing.B) {
	bpe, spm := tokTestBuilt(b)
	texts := map[string]string{
		"letters": strings.Repeat("abcdefghij", 10000),
		"cjk":     strings.Repeat("日本語のテキスト中文文本", 3000),
		"spaces":  strings.Repeat(" ", 100000),
	}
	for _, kind := range []string{"letters", "cjk", "spaces"} {
		for _, c := range []struct {
			name string
			tk   *Tokenizer
		}{{"bpe", bpe}, {"spm", spm}} {
			b.Run(fmt.Sprintf("vocab=%s/text=%s", c.name, kind), func(b *testing.B) { benchEncode(b, c.tk, texts[kind]) })
		}
	}
}

func BenchmarkTokenizerDecode(b *testing.B) {
	bpe, spm := tokTestBuilt(b)
	for _, c := range []struct {
		name string
		tk   *Tokenizer
	}{{"bpe", bpe}, {"spm", spm}} {
		b.Run("vocab="+c.name, func(b *testing.B) {
			ids := c.tk.Encode(tokBenchText(c.tk, 32000), true)
			b.ReportAllocs()
			for b.Loop() {
				d := NewDetokenizer(c.tk)
				for _, id := range ids {
					d.Add(id)
				}
				d.Flush()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(ids)), "ns/token")
		})
	}
}
