package tokenizer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBuildVocab(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"bpe", "spm"} {
		for _, size := range []int{400, 1000, 5000} {
			v, err := BuildVocab(kind, size)
			require.NoError(t, err, "%s %d", kind, size)
			require.Len(t, v.Tokens, size)
			require.Len(t, v.Types, size)
			if kind == "spm" {
				require.Len(t, v.Scores, size)
			}
			again, err := BuildVocab(kind, size)
			require.NoError(t, err)
			require.Equal(t, v, again, "deterministic")

			tk := tokTestNew(t, v)
			require.Equal(t, size, tk.VocabSize())
			require.True(t, tk.AddBOS())
			s := "The server can't stop: 12345 tokens, café!\n"
			require.Equal(t, s, tk.Decode(tk.Encode(s, true)))
			require.Less(t, len(tk.Encode(s, false)), len(s), "%s %d: merges shorten text", kind, size)
		}
	}
}

func TestBuildVocabSpecials(t *testing.T) {
	t.Parallel()
	bpe, spm := tokTestBuilt(t)
	ids := bpe.Encode("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|im_start|>x<|im_end|><|endoftext|>", false)
	var specials []int32
	for _, id := range ids {
		if bpe.TokenType(id) == TokenTypeControl {
			specials = append(specials, id)
		}
	}
	require.Len(t, specials, 7)
	bos, ok := bpe.BOS()
	require.True(t, ok)
	require.Equal(t, "<|begin_of_text|>", bpe.Token(bos))
	require.Equal(t, "<|end_of_text|>", bpe.Token(bpe.EOS()))
	var eog []string
	for _, id := range bpe.EndOfGeneration() {
		eog = append(eog, bpe.Token(id))
	}
	require.ElementsMatch(t, []string{"<|end_of_text|>", "<|eot_id|>", "<|im_end|>", "<|endoftext|>"}, eog)
	require.Equal(t, "llama-bpe", bpe.Pre())

	bos, _ = spm.BOS()
	require.Equal(t, "<s>", spm.Token(bos))
	require.Equal(t, "</s>", spm.Token(spm.EOS()))
	require.Equal(t, []int32{2}, spm.EndOfGeneration())
	require.Equal(t, "<0x0A>", spm.Token(spm.Encode("\n", false)[1]))
}

func TestBuildVocabPadsWhenTextRunsOut(t *testing.T) {
	t.Parallel()
	for kind, pad := range map[string]string{"bpe": "<|reserved_special_token_0|>", "spm": "<unused0>"} {
		v, err := BuildVocab(kind, 20000)
		require.NoError(t, err)
		require.Contains(t, v.Tokens, pad, kind)
		tk := tokTestNew(t, v)
		_, ok := tk.TokenID(pad)
		require.True(t, ok)
	}
}

func TestBuildVocabErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		kind string
		size int
	}{
		"unknown kind":  {"unigram", 1000},
		"bpe too small": {"bpe", 263},
		"spm too small": {"spm", 259},
		"too large":     {"bpe", tokMaxVocab + 1},
		"negative size": {"spm", -1},
		"zero size":     {"bpe", 0},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := BuildVocab(tc.kind, tc.size)
			require.Error(t, err)
			require.Contains(t, err.Error(), "model: ")
		})
	}
}
