package workload

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/sim"
)

func TestParseDist(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		in   string
		want Dist
		err  bool
	}{
		"fixed":           {in: "128", want: Fixed(128)},
		"uniform":         {in: "uniform:64-512", want: Uniform(64, 512)},
		"uniform one":     {in: "uniform:5-5", want: Uniform(5, 5)},
		"normal":          {in: "normal:512,128", want: Normal(512, 128)},
		"normal fraction": {in: "normal:10.5,0.5", want: Normal(10.5, 0.5)},
		"zero":            {in: "0", err: true},
		"negative":        {in: "-3", err: true},
		"word":            {in: "many", err: true},
		"uniform reverse": {in: "uniform:9-3", err: true},
		"uniform zero":    {in: "uniform:0-3", err: true},
		"uniform junk":    {in: "uniform:3", err: true},
		"normal junk":     {in: "normal:3", err: true},
		"normal negative": {in: "normal:30,-1", err: true},
		"normal nan":      {in: "normal:NaN,1", err: true},
		"unknown kind":    {in: "zipf:1.1", err: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d, err := ParseDist(tc.in)
			if tc.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, d)
			back, err := ParseDist(d.String())
			require.NoError(t, err)
			require.Equal(t, d, back, "String round-trips: %s", d)
		})
	}
}

func TestDistMeans(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		d        Dist
		mean     float64
		min, max int
	}{
		"fixed":   {d: Fixed(7), mean: 7, min: 7, max: 7},
		"uniform": {d: Uniform(64, 512), mean: 288, min: 64, max: 512},
		"normal":  {d: Normal(512, 128), mean: 512, min: 1, max: math.MaxInt},
		// Clamping at 1 pulls the mean of a wide normal up.
		"normal clamped": {d: Normal(2, 0.1), mean: 2, min: 1, max: math.MaxInt},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			const n = 100_000
			sum := 0.0
			for range n {
				v := tc.d.Sample(r)
				require.GreaterOrEqual(t, v, tc.min)
				require.LessOrEqual(t, v, tc.max)
				sum += float64(v)
			}
			assert.InDelta(t, tc.mean, sum/n, tc.mean*0.01+0.01)
		})
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10_000 {
		require.GreaterOrEqual(t, Normal(1, 50).Sample(r), 1, "clamped to at least 1")
	}
}

func baseSpec() Spec {
	return Spec{
		Requests: 2000, Rate: 50, Input: Uniform(100, 400), Output: Fixed(64),
		Seed: 42,
	}
}

func TestPoissonArrivals(t *testing.T) {
	t.Parallel()
	s := baseSpec()
	s.Requests = 20_000
	items, err := Generate(s)
	require.NoError(t, err)
	require.Len(t, items, s.Requests)
	var sum, sumSq float64
	prev := time.Duration(0)
	for _, it := range items {
		require.GreaterOrEqual(t, it.At, prev, "sorted by At")
		gap := (it.At - prev).Seconds()
		sum += gap
		sumSq += gap * gap
		prev = it.At
	}
	mean := sum / float64(len(items))
	sd := math.Sqrt(sumSq/float64(len(items)) - mean*mean)
	assert.InDelta(t, 1/s.Rate, mean, 0.02/s.Rate, "mean gap is 1/rate")
	// Exponential gaps: the standard deviation equals the mean.
	assert.InDelta(t, mean, sd, 0.05*mean)
}

func TestGenerateDuration(t *testing.T) {
	t.Parallel()
	s := baseSpec()
	s.Requests = 0
	s.Duration = 100 * time.Second
	items, err := Generate(s)
	require.NoError(t, err)
	assert.InDelta(t, 5000, len(items), 300, "about rate*duration")
	for _, it := range items {
		require.Less(t, it.At, s.Duration)
	}

	s.Requests = 100
	items, err = Generate(s)
	require.NoError(t, err)
	require.Len(t, items, 100, "the first limit wins")
}

func TestReproducible(t *testing.T) {
	t.Parallel()
	s := baseSpec()
	s.Turns = Uniform(1, 4)
	s.SharedPrefix, s.SystemPrompts, s.SystemTokens = 0.5, 3, Uniform(200, 800)
	s.CancelRatio = 0.1
	s.Tenants = []string{"a", "b", "c"}
	a, err := Generate(s)
	require.NoError(t, err)
	b, err := Generate(s)
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.Equal(t, s.UserText(a[5]), s.UserText(b[5]))

	s.Seed++
	c, err := Generate(s)
	require.NoError(t, err)
	require.NotEqual(t, a, c)
}

func TestSharedPrefix(t *testing.T) {
	t.Parallel()
	s := baseSpec()
	s.Requests = 20_000
	s.SharedPrefix, s.SystemPrompts, s.SystemTokens = 0.3, 4, Uniform(100, 1000)
	items, err := Generate(s)
	require.NoError(t, err)
	shared := 0
	lengths := map[int]int{}
	for _, it := range items {
		if it.System < 0 {
			require.Zero(t, it.SystemTokens)
			continue
		}
		shared++
		require.Less(t, it.System, 4)
		if l, ok := lengths[it.System]; ok {
			require.Equal(t, l, it.SystemTokens, "one length per system prompt")
		}
		lengths[it.System] = it.SystemTokens
	}
	assert.InDelta(t, 0.3, float64(shared)/float64(len(items)), 0.02)
	require.Len(t, lengths, 4, "every system prompt is used")
	require.Equal(t, s.SystemText(2), s.SystemText(2))
	require.NotEqual(t, s.SystemText(1), s.SystemText(2))
}

func TestConversationsOrdered(t *testing.T) {
	t.Parallel()
	s := baseSpec()
	s.Turns = Uniform(1, 5)
	s.ThinkTime = 2 * time.Second
	s.SharedPrefix, s.SystemPrompts, s.SystemTokens = 1, 2, Fixed(50)
	s.Tenants = []string{"x", "y"}
	items, err := Generate(s)
	require.NoError(t, err)
	type state struct {
		turn  int
		at    time.Duration
		first Item
	}
	seen := map[int]*state{}
	maxConv := -1
	for _, it := range items {
		st, ok := seen[it.Conversation]
		if !ok {
			require.Zero(t, it.Turn, "a conversation starts at turn 0")
			require.Equal(t, maxConv+1, it.Conversation, "conversations numbered in order")
			maxConv = it.Conversation
			seen[it.Conversation] = &state{turn: 0, at: it.At, first: it}
			continue
		}
		require.Equal(t, st.turn+1, it.Turn, "turns in order")
		require.GreaterOrEqual(t, it.At-st.at, s.ThinkTime, "think time between turns")
		require.Less(t, it.Turn, it.Turns)
		require.Equal(t, st.first.System, it.System, "a conversation keeps its system prompt")
		require.Equal(t, st.first.Tenant, it.Tenant, "and its tenant")
		st.turn, st.at = it.Turn, it.At
	}
	multi := 0
	for _, st := range seen {
		if st.turn > 0 {
			multi++
		}
	}
	require.Greater(t, multi, len(seen)/2, "most conversations have several turns")
}

func TestSource(t *testing.T) {
	t.Parallel()
	s := baseSpec()
	s.Rate, s.Concurrency, s.Requests = 0, 8, 103
	s.Turns = Uniform(1, 4)
	src := NewSource(s)
	var all []Item
	for {
		conv, ok := src.NextConversation()
		if !ok {
			break
		}
		for k, it := range conv {
			require.Equal(t, k, it.Turn)
			require.Zero(t, it.At)
		}
		all = append(all, conv...)
	}
	require.Len(t, all, 103, "Requests bounds the items")

	// Next gives the same items, one at a time.
	src = NewSource(s)
	for i := range all {
		it, ok := src.Next()
		require.True(t, ok)
		require.Equal(t, all[i], it)
	}
	_, ok := src.Next()
	require.False(t, ok)

	// The conversations are those of the open loop.
	s.Rate = 10
	open, err := Generate(s)
	require.NoError(t, err)
	first := map[int]Item{}
	for _, it := range all {
		if it.Turn == 0 {
			first[it.Conversation] = it
		}
	}
	for _, it := range open {
		if f, ok := first[it.Conversation]; ok && it.Turn == 0 {
			it.At = 0
			require.Equal(t, f, it)
		}
	}
}

func TestCancelAndTenants(t *testing.T) {
	t.Parallel()
	s := baseSpec()
	s.Requests = 10_000
	s.CancelRatio = 0.2
	s.Tenants = []string{"a", "b", "c", "d"}
	items, err := Generate(s)
	require.NoError(t, err)
	cancel := 0
	tenants := make([]int, 4)
	for _, it := range items {
		if it.Cancel {
			cancel++
		}
		tenants[it.Tenant]++
	}
	assert.InDelta(t, 0.2, float64(cancel)/float64(len(items)), 0.02)
	for _, n := range tenants {
		assert.InDelta(t, 0.25, float64(n)/float64(len(items)), 0.03)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := baseSpec()
	require.NoError(t, ok.Validate())
	cases := map[string]func(*Spec){
		"no limit":         func(s *Spec) { s.Requests, s.Duration = 0, 0 },
		"no rate nor conc": func(s *Spec) { s.Rate, s.Concurrency = 0, 0 },
		"negative rate":    func(s *Spec) { s.Rate = -1 },
		"no input":         func(s *Spec) { s.Input = Dist{} },
		"no output":        func(s *Spec) { s.Output = Dist{} },
		"share too big":    func(s *Spec) { s.SharedPrefix = 1.5 },
		"share no prompts": func(s *Spec) { s.SharedPrefix = 0.5 },
		"cancel too big":   func(s *Spec) { s.CancelRatio = 2 },
		"negative think":   func(s *Spec) { s.ThinkTime = -time.Second },
		"empty dataset":    func(s *Spec) { s.Dataset = []Prompt{{}} },
	}
	for name, mod := range cases {
		t.Run(name, func(t *testing.T) {
			s := baseSpec()
			mod(&s)
			require.Error(t, s.Validate())
			_, err := Generate(s)
			require.Error(t, err)
		})
	}
	s := baseSpec()
	s.Rate, s.Concurrency = 0, 4
	_, err := Generate(s)
	require.Error(t, err, "closed loop is NewSource's")
}

func TestTextTokensSim(t *testing.T) {
	t.Parallel()
	m, err := sim.ModelByName("small")
	require.NoError(t, err)
	tok := sim.NewTokenizer(m)
	for _, n := range []int{1, 2, 3, 5, 9, 17, 64, 100, 255, 800, 4000} {
		for seed := range uint64(5) {
			text := Text(n, seed)
			require.Len(t, tok.Encode(text), n, "tokens=%d seed=%d: %q", n, seed, text)
			require.Equal(t, text, Text(n, seed))
			assert.InDelta(t, n, ApproxTokens(text), float64(n)*0.1+1, "ApproxTokens of plain words")
		}
	}
	require.Empty(t, Text(0, 1))
	require.NotEqual(t, Text(50, 1)[:20], Text(50, 2)[:20], "seeds differ from the start")
}

func TestApproxTokens(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0, ApproxTokens(""))
	require.Equal(t, 3, ApproxTokens("Hello, world"))
	require.Equal(t, 2, ApproxTokens("12345"))
	require.Equal(t, 4, ApproxTokens("internationalization"))
	require.Equal(t, 1, ApproxTokens("question"))
}

func TestLoadJSONL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	ps, err := LoadJSONL(write("a.jsonl", `{"prompt":"Explain paging.","output_tokens":200}

{"prompt":"Why?"}
{"conversations":[{"from":"human","value":"Hi there"},{"from":"gpt","value":"Hello, how can I help you today?"}]}
{"conversations":[{"from":"gpt","value":"orphan"}]}
`))
	require.NoError(t, err)
	require.Equal(t, []Prompt{
		{Text: "Explain paging.", OutputTokens: 200},
		{Text: "Why?"},
		{Text: "Hi there", OutputTokens: 9},
	}, ps)

	ps, err = LoadJSONL(write("share.json", ` [{"conversations":[{"from":"human","value":"Q"},{"from":"gpt","value":"A b"}]}]`))
	require.NoError(t, err)
	require.Equal(t, []Prompt{{Text: "Q", OutputTokens: 2}}, ps)

	_, err = LoadJSONL(write("bad.jsonl", "{\"prompt\":\"a\"}\nnot json\n"))
	require.ErrorContains(t, err, "line 2")
	_, err = LoadJSONL(write("empty.jsonl", "\n\n"))
	require.Error(t, err)
	_, err = LoadJSONL(write("nofield.jsonl", `{"text":"a"}`))
	require.Error(t, err)
	_, err = LoadJSONL(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)

	s := baseSpec()
	s.Dataset = ps
	items, err := Generate(s)
	require.NoError(t, err)
	for _, it := range items[:10] {
		require.Equal(t, 0, it.Prompt)
		require.Equal(t, "Q", s.UserText(it))
		require.Equal(t, 2, it.OutputTokens)
	}
}
