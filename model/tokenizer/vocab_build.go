package tokenizer

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// vocabCorpus is the built-in English text BuildVocab learns from.
const vocabCorpus = `The small server woke before dawn and began to answer questions. It did not know the
people who asked them, but it knew the shape of their words: short ones, long ones, numbers
like 42, 1024 and 3.14159, dates such as 2024-05-17, and names it had never seen before.

Each request arrived as text. The server cut the text into tokens, looked up each token in its
vocabulary, and passed the numbers to the model. The model read them one at a time, kept what it
had learned in a cache, and wrote back one token after another until it reached the end.

"Why don't you stop?" asked a curious user. "I can't stop until I'm done," the server said.
"You'll see the answer soon. We've all got to wait for the last token; they're coming quickly."

Tokenization is the first step of every request and the last step of every reply. A word that
appears often becomes a single token; a rare word is built from smaller pieces; a strange
character falls back to its bytes. Spaces matter, newlines matter, and capital Letters matter too.

    def answer(question):
        tokens = tokenize(question)
        return generate(tokens, max_tokens=256)

The weather was cold in the morning and warm in the afternoon. The river ran quietly past the
old mill, where the miller kept his flour in wooden barrels and counted them twice a day: one,
two, three, four, five, six, seven, eight, nine, ten. On the market square people sold bread,
cheese, apples, pears and honey, and children played between the stalls until evening came.

A good cache saves time. When two requests share the same beginning, the server can reuse the
work it has already done for the first one, and the second answer starts sooner. When memory
runs short, the oldest entries leave first, and the newest stay as long as they are useful.

She said: "It's a café, not a cafe; the naïve spelling loses the accent." He laughed and wrote
the word again, slowly, letter by letter, while the rain kept falling on the roof.

Questions, answers, numbers and names: the server handled them all, one token at a time, from
the first light of the morning until the quiet hours of the night.
`

// vocabBPESpecials are the control tokens of a built BPE vocabulary, enough
// for Llama 3 and ChatML chat templates.
var vocabBPESpecials = []string{
	"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
	"<|im_start|>", "<|im_end|>", "<|endoftext|>",
}

// BuildVocab builds a small but real vocabulary of exactly size tokens
// without downloads, for test models (llmctl model init). It is
// deterministic. kind "bpe" gives a byte-level BPE vocabulary with the
// Llama 3 pre-tokenizer: the 256 GPT-2 byte tokens, merges learned from a
// built-in English text, control tokens (<|begin_of_text|> as BOS,
// <|end_of_text|> as EOS, <|eot_id|>, Llama 3 header tokens,
// <|im_start|>, <|im_end|>, <|endoftext|>) and, when the text runs out of
// merges, reserved control tokens. kind "spm" gives a SentencePiece-style
// vocabulary: <unk>, <s>, </s>, the byte tokens <0x00>..<0xFF>, pieces
// learned from the same text with scores, the text's characters, and,
// when the text runs out, unused tokens. kind "wordpiece" gives a BERT
// vocabulary in llama.cpp's GGUF form (see vocabBuildWordPiece).
func BuildVocab(kind string, size int) (Vocab, error) {
	if size > tokMaxVocab {
		return Vocab{}, fmt.Errorf("model: vocabulary size %d above the limit of %d", size, tokMaxVocab)
	}
	switch kind {
	case "bpe":
		return vocabBuildBPE(size)
	case "spm":
		return vocabBuildSPM(size)
	case "wordpiece":
		return vocabBuildWordPiece(size)
	}
	return Vocab{}, fmt.Errorf("model: unknown vocabulary kind %q (want \"bpe\", \"spm\" or \"wordpiece\")", kind)
}

// vocabWord is a distinct word of the corpus as symbols, with its count.
type vocabWord struct {
	syms  []string
	count int
}

// vocabLearn learns merges from words by byte-pair encoding: the most
// frequent adjacent pair (the smallest pair on ties) merges next. It stops
// after max merges or when no pair is left, and returns the merges in
// order.
func vocabLearn(words []vocabWord, max int) [][2]string {
	var merges [][2]string
	for len(merges) < max {
		counts := map[[2]string]int{}
		for _, w := range words {
			for i := 1; i < len(w.syms); i++ {
				counts[[2]string{w.syms[i-1], w.syms[i]}] += w.count
			}
		}
		if len(counts) == 0 {
			break
		}
		var best [2]string
		bestN := 0
		for p, n := range counts {
			if n > bestN || n == bestN && (p[0] < best[0] || p[0] == best[0] && p[1] < best[1]) {
				best, bestN = p, n
			}
		}
		merges = append(merges, best)
		merged := best[0] + best[1]
		for wi := range words {
			s := words[wi].syms
			out := s[:0]
			for i := 0; i < len(s); i++ {
				if i+1 < len(s) && s[i] == best[0] && s[i+1] == best[1] {
					out = append(out, merged)
					i++
					continue
				}
				out = append(out, s[i])
			}
			words[wi].syms = out
		}
	}
	return merges
}

// vocabWords counts the words of the corpus and returns them sorted.
func vocabWords(pieces []string, split func(string) []string) []vocabWord {
	counts := map[string]int{}
	for _, p := range pieces {
		counts[p]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	words := make([]vocabWord, len(keys))
	for i, k := range keys {
		words[i] = vocabWord{syms: split(k), count: counts[k]}
	}
	return words
}

func vocabBuildBPE(size int) (Vocab, error) {
	minSize := 256 + len(vocabBPESpecials)
	if size < minSize {
		return Vocab{}, fmt.Errorf("model: bpe vocabulary size %d below the minimum of %d", size, minSize)
	}
	v := Vocab{Model: "gpt2", Pre: "llama-bpe", EOM: -1, UNK: -1, PAD: -1, AddBOS: true}
	seen := map[string]bool{}
	add := func(s string, ty int32) {
		seen[s] = true
		v.Tokens = append(v.Tokens, s)
		v.Types = append(v.Types, ty)
	}
	// The byte tokens in GPT-2's order: the printable bytes first.
	order := make([]int, 256)
	for b := range order {
		order[b] = b
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(bpeByteRune[a], bpeByteRune[b]) })
	for _, b := range order {
		add(bpeByteStr[b], TokenTypeNormal)
	}

	var p pretokText
	pieces := pretokScanLlama3(vocabCorpus, 3, &p, nil)
	words := vocabWords(pieces, func(s string) []string {
		syms := make([]string, len(s))
		for i := 0; i < len(s); i++ {
			syms[i] = bpeByteStr[s[i]]
		}
		return syms
	})
	budget := size - len(v.Tokens) - len(vocabBPESpecials)
	// Some merges make a token that exists already; learn a few extra.
	for _, m := range vocabLearn(words, budget*2) {
		if len(v.Tokens) >= size-len(vocabBPESpecials) {
			break
		}
		v.Merges = append(v.Merges, m[0]+" "+m[1])
		if s := m[0] + m[1]; !seen[s] {
			add(s, TokenTypeNormal)
		}
	}
	for i := 0; len(v.Tokens) < size-len(vocabBPESpecials); i++ {
		add(fmt.Sprintf("<|reserved_special_token_%d|>", i), TokenTypeControl)
	}
	ids := map[string]int32{}
	for _, s := range vocabBPESpecials {
		ids[s] = int32(len(v.Tokens))
		add(s, TokenTypeControl)
	}
	v.BOS, v.EOS, v.EOT = ids["<|begin_of_text|>"], ids["<|end_of_text|>"], ids["<|eot_id|>"]
	return v, nil
}

func vocabBuildSPM(size int) (Vocab, error) {
	// Words as SentencePiece sees them: each line with a ▁ prefix and ▁
	// for spaces, cut before every ▁.
	var pieces []string
	for line := range strings.Lines(vocabCorpus) {
		line = strings.TrimRight(line, "\n")
		if line == "" {
			continue
		}
		s := strings.ReplaceAll(" "+line, " ", spmSpace)
		for s != "" {
			end := strings.Index(s[len(spmSpace):], spmSpace)
			if end < 0 {
				pieces = append(pieces, s)
				break
			}
			pieces = append(pieces, s[:end+len(spmSpace)])
			s = s[end+len(spmSpace):]
		}
	}
	words := vocabWords(pieces, func(s string) []string {
		var syms []string
		for _, r := range s {
			syms = append(syms, string(r))
		}
		return syms
	})
	charCount := map[string]int{}
	for _, w := range words {
		for _, c := range w.syms {
			charCount[c] += w.count
		}
	}
	chars := make([]string, 0, len(charCount))
	for c := range charCount {
		chars = append(chars, c)
	}
	slices.SortFunc(chars, func(a, b string) int {
		if c := cmp.Compare(charCount[b], charCount[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})

	const fixed = 3 + 256
	minSize := fixed + len(chars)
	if size < minSize {
		return Vocab{}, fmt.Errorf("model: spm vocabulary size %d below the minimum of %d", size, minSize)
	}
	v := Vocab{Model: "llama", BOS: 1, EOS: 2, EOT: -1, EOM: -1, UNK: 0, PAD: -1, AddBOS: true, AddSpacePrefix: true}
	seen := map[string]bool{}
	add := func(s string, score float32, ty int32) {
		seen[s] = true
		v.Tokens = append(v.Tokens, s)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, ty)
	}
	add("<unk>", 0, TokenTypeUnknown)
	add("<s>", 0, TokenTypeControl)
	add("</s>", 0, TokenTypeControl)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), 0, TokenTypeByte)
	}
	budget := size - fixed - len(chars)
	n := 0
	for _, m := range vocabLearn(words, budget*2) {
		if n == budget {
			break
		}
		if s := m[0] + m[1]; !seen[s] {
			add(s, -float32(n), TokenTypeNormal)
			n++
		}
	}
	for i, c := range chars {
		add(c, -float32(n+i), TokenTypeNormal)
	}
	for i := 0; len(v.Tokens) < size; i++ {
		add(fmt.Sprintf("<unused%d>", i), 0, TokenTypeUnused)
	}
	return v, nil
}
