package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The expected splits were checked against the reference regular
// expressions with Python's regex module (which has lookahead); the
// default chain against llama.cpp's split-by-stages semantics.
func TestPretokSplit(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		kind pretokKind
		text string
		want []string
	}{
		"llama3 digits by three":         {pretokLlama3, "1234567", []string{"123", "456", "7"}},
		"llama3 digits after space":      {pretokLlama3, "x 12345 y", []string{"x", " ", "123", "45", " y"}},
		"llama3 other digits":            {pretokLlama3, "٣٤٥٦", []string{"٣٤٥", "٦"}},
		"llama3 decimal":                 {pretokLlama3, "3.14", []string{"3", ".", "14"}},
		"qwen2 digits one by one":        {pretokQwen2, "x 12345 y", []string{"x", " ", "1", "2", "3", "4", "5", " y"}},
		"qwen2 other digits":             {pretokQwen2, "٣٤", []string{"٣", "٤"}},
		"gpt2 digit runs":                {pretokGPT2, "x 12345 y", []string{"x", " 12345", " y"}},
		"llama3 contractions any case":   {pretokLlama3, "I'm you're we've he'd it'll IT'S DON'T", []string{"I", "'m", " you", "'re", " we", "'ve", " he", "'d", " it", "'ll", " IT", "'S", " DON", "'T"}},
		"qwen2 contractions any case":    {pretokQwen2, "IT'S we'LL", []string{"IT", "'S", " we", "'LL"}},
		"gpt2 contractions lowercase":    {pretokGPT2, "it's IT'S", []string{"it", "'s", " IT", "'", "S"}},
		"contraction then contraction":   {pretokLlama3, "don't'll", []string{"don", "'t", "'ll"}},
		"apostrophe not a contraction":   {pretokLlama3, "'x 's", []string{"'x", " '", "s"}},
		"two spaces":                     {pretokLlama3, "a  b", []string{"a", " ", " b"}},
		"spaces before word keep one":    {pretokLlama3, "a   b", []string{"a", "  ", " b"}},
		"trailing spaces":                {pretokLlama3, "end  ", []string{"end", "  "}},
		"space newline space":            {pretokLlama3, "a \n b", []string{"a", " \n", " b"}},
		"newlines together":              {pretokLlama3, "a\n\n\nb", []string{"a", "\n\n\n", "b"}},
		"crlf and tab":                   {pretokLlama3, "a \r\n\tb", []string{"a", " \r\n", "\tb"}},
		"tabs":                           {pretokLlama3, "x\t\ty", []string{"x", "\t", "\ty"}},
		"punctuation takes newlines":     {pretokLlama3, "hello,world!!\n\nok", []string{"hello", ",world", "!!\n\n", "ok"}},
		"space before punctuation":       {pretokLlama3, " ?!x", []string{" ?!", "x"}},
		"brackets":                       {pretokLlama3, "(a)=>{b}", []string{"(a", ")=>{", "b", "}"}},
		"non-latin letters":              {pretokLlama3, "中文 テキスト héllo", []string{"中文", " テキスト", " héllo"}},
		"gpt2 newlines":                  {pretokGPT2, "a\n\n\nb", []string{"a", "\n\n", "\n", "b"}},
		"gpt2 punctuation":               {pretokGPT2, "hello,world!!\n\nok", []string{"hello", ",", "world", "!!", "\n", "\n", "ok"}},
		"default digits by three":        {pretokDefault, "x 1234567 y", []string{"x", " ", "123", "456", "7", " y"}},
		"default punctuation first":      {pretokDefault, "$100+5", []string{"$", "100", "+", "5"}},
		"default words":                  {pretokDefault, "hello, world!", []string{"hello", ",", " world", "!"}},
		"default contraction is punct":   {pretokDefault, "don't stop", []string{"don", "'", "t", " stop"}},
		"default mixed digits":           {pretokDefault, "a1b2c3d4567", []string{"a", "1", "b", "2", "c", "3", "d", "456", "7"}},
		"invalid bytes are other":        {pretokLlama3, "a\xff\xfeb 1", []string{"a", "\xff\xfe", "b", " ", "1"}},
		"empty":                          {pretokLlama3, "", nil},
		"only spaces":                    {pretokQwen2, "   ", []string{"   "}},
		"only newline":                   {pretokGPT2, "\n", []string{"\n"}},
		"letter after other digit class": {pretokQwen2, "²x", []string{"²", "x"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var p pretokText
			require.Equal(t, tc.want, pretokSplit(tc.kind, tc.text, &p, nil))
		})
	}
}

func TestPretokKindFor(t *testing.T) {
	t.Parallel()
	for pre, want := range map[string]pretokKind{
		"": pretokDefault, "default": pretokDefault, "gpt-2": pretokGPT2,
		"llama-bpe": pretokLlama3, "llama3": pretokLlama3, "llama-v3": pretokLlama3, "qwen2": pretokQwen2,
	} {
		got, err := pretokKindFor(pre)
		require.NoError(t, err, pre)
		require.Equal(t, want, got, pre)
	}
	_, err := pretokKindFor("starcoder")
	require.ErrorIs(t, err, ErrUnsupported)
}

// TestPretokKeepsText checks that the pieces of random text put together
// give the text back, for every pre-tokenizer.
func TestPretokKeepsText(t *testing.T) {
	t.Parallel()
	atoms := []string{" ", "  ", "\t", "\n", "\r\n", "\u00a0", "a", "Zé", "中", "'s", "'LL", "1", "٣", "½", ".", "$", "<|", "🤖", "\xff", "\xc3"}
	rng := rand.New(rand.NewPCG(1, 2))
	var p pretokText
	for range 2000 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(atoms[rng.IntN(len(atoms))])
		}
		s := b.String()
		for _, kind := range []pretokKind{pretokDefault, pretokGPT2, pretokLlama3, pretokQwen2} {
			pieces := pretokSplit(kind, s, &p, nil)
			require.Equal(t, s, strings.Join(pieces, ""), "kind %d %q", kind, s)
			for _, piece := range pieces {
				require.NotEmpty(t, piece)
			}
		}
	}
}
