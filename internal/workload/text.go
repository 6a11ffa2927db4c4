package workload

import (
	"math/rand/v2"
	"strings"
	"unicode"
)

// Text returns deterministic English-like prose of about tokens tokens:
// the same tokens and seed always give the same text, and different seeds
// differ from the first words on (so unrelated prompts share no prefix).
//
// The words are taken from the vocabulary of llmd's simulated models
// (engine/sim), where each word, with or without its leading space and
// capitalised or not, is one token, as is a period; so for sim/* models
// the count is exact for the text alone (a chat template adds its own
// tokens). For real tokenizers it is approximate: these are common English
// words, one token each in most BPE vocabularies, and a real server's
// count is usually within a few percent.
func Text(tokens int, seed uint64) string {
	if tokens <= 0 {
		return ""
	}
	r := rand.New(rand.NewPCG(seed, streamText))
	var b strings.Builder
	b.Grow(tokens * 7)
	for n := 0; n < tokens; {
		if n > 0 {
			b.WriteByte(' ')
		}
		// A sentence of w words and a period is w+1 tokens; the last one
		// takes what is left, so the text ends on a period.
		left := tokens - n
		w := 6 + r.IntN(9)
		if left <= w+4 {
			w = left - 1
		}
		if w == 0 {
			b.WriteString(capitalise(textWords[r.IntN(len(textWords))]))
			break
		}
		b.WriteString(capitalise(textWords[r.IntN(len(textWords))]))
		for range w - 1 {
			b.WriteByte(' ')
			b.WriteString(textWords[r.IntN(len(textWords))])
		}
		b.WriteByte('.')
		n += w + 1
	}
	return b.String()
}

func capitalise(w string) string {
	r := []rune(w)
	r[0] = unicode.ToUpper(r[0])
	return string(r)
}

// ApproxTokens estimates the token count of s for a typical BPE
// tokenizer: one token per word of up to 8 letters, one more per further
// 4 letters, one per digit group of up to 3 and one per other symbol.
func ApproxTokens(s string) int {
	n := 0
	run, digits := 0, false
	flush := func() {
		if run > 0 {
			if digits {
				n += (run + 2) / 3
			} else {
				n += 1 + (max(run-8, 0)+3)/4
			}
		}
		run = 0
	}
	for _, c := range s {
		switch {
		case unicode.IsLetter(c):
			if digits {
				flush()
			}
			digits = false
			run++
		case unicode.IsDigit(c):
			if !digits {
				flush()
			}
			digits = true
			run++
		case unicode.IsSpace(c):
			flush()
		default:
			flush()
			n++
		}
	}
	flush()
	return n
}

// textWords are words of llmd's sim vocabulary (engine/sim/words.go), each
// one token there, and all common enough to be one token in real BPE
// vocabularies. Keep them in the sim list: the token count of Text depends
// on it (TestTextTokensSim checks).
var textWords = [...]string{
	"the", "of", "and", "to", "a", "in", "is", "that", "for", "it",
	"as", "with", "on", "by", "this", "be", "are", "from", "at", "or",
	"an", "was", "which", "but", "not", "all", "can", "has", "more", "its",
	"into", "than", "each", "their", "over", "under", "when", "where",
	"while", "because", "so", "if", "then", "also", "only", "most", "some", "such",
	"time", "people", "way", "day", "world", "life", "hand", "part", "place", "case",
	"week", "system", "program", "question", "work", "number", "night", "point", "home", "water",
	"room", "area", "money", "story", "fact", "month", "lot", "right", "study", "book",
	"eye", "job", "word", "business", "issue", "side", "kind", "head", "house", "service",
	"friend", "power", "hour", "game", "line", "end", "member", "law", "car", "city",
	"community", "name", "team", "minute", "idea", "body", "information", "back", "parent",
	"face", "level", "office", "door", "health", "person", "art", "history", "party",
	"result", "change", "morning", "reason", "research", "moment", "air", "teacher",
	"force", "education", "river", "garden", "market", "music", "paper", "window", "road", "field",
	"light", "sound", "voice", "stone", "tree", "forest", "mountain", "island", "ocean", "bridge",
	"machine", "engine", "signal", "pattern", "method", "model", "process", "structure", "theory", "value",
	"energy", "season", "weather", "letter", "language", "picture", "memory", "detail", "surface", "shape",
	"make", "take", "find", "give", "tell", "call", "try", "ask", "need",
	"feel", "become", "leave", "put", "mean", "keep", "let", "begin", "seem", "help",
	"show", "hear", "play", "run", "move", "live", "believe", "bring", "happen", "write",
	"provide", "sit", "stand", "lose", "pay", "meet", "include", "continue", "set", "learn",
	"lead", "understand", "watch", "follow", "stop", "create", "speak", "read", "allow", "add",
	"good", "new", "first", "last", "long", "great", "little", "own", "other", "old",
	"big", "high", "different", "small", "large", "next", "early", "young", "important", "few",
	"public", "bad", "same", "able", "simple", "clear", "recent", "certain",
	"whole", "free", "real", "full", "special", "easy", "strong", "possible", "ready", "local",
	"often", "always", "never", "sometimes", "usually", "already", "almost", "again", "soon", "still",
	"north", "south", "summer", "winter", "spring", "village", "valley",
	"journey", "answer", "balance", "chapter", "distance", "evening", "feature",
	"kitchen", "library", "message", "network", "option", "planet",
	"practice", "quality", "record", "region", "sample", "schedule", "section", "session",
	"station", "strategy", "student", "subject", "support", "table", "task", "thread", "token",
	"traffic", "update", "version", "vision", "volume", "zone", "border",
	"branch", "circle", "cloud", "corner", "current", "desert", "engineer", "factory",
}

// TokenIDs returns n deterministic token ids drawn uniformly from [lo, hi):
// a prompt of exactly n tokens for any server whose vocabulary covers the
// range, whatever its tokenizer. The same n, seed and range always give the
// same ids, and different seeds differ from the first id on (as Text).
func TokenIDs(n int, seed uint64, lo, hi int) []int {
	if n <= 0 || hi <= lo {
		return nil
	}
	r := rand.New(rand.NewPCG(seed, streamText))
	ids := make([]int, n)
	for i := range ids {
		ids[i] = lo + r.IntN(hi-lo)
	}
	return ids
}

// SystemIDs is SystemText as token ids from [lo, hi).
func (s Spec) SystemIDs(i, lo, hi int) []int {
	return TokenIDs(s.SystemPromptTokens(i), mix64(s.Seed^mix64(streamSystem+uint64(i))), lo, hi)
}
