package pipeline

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTextStream(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		stops   []string
		pieces  []string
		want    []string // output per push
		stopped bool
		flush   string
	}{
		"no stops":           {pieces: []string{"a", "b"}, want: []string{"a", "b"}},
		"hold prefix":        {stops: []string{"END"}, pieces: []string{"xE", "N", "Q"}, want: []string{"x", "", "ENQ"}},
		"match across":       {stops: []string{"END"}, pieces: []string{"aE", "ND tail"}, want: []string{"a", ""}, stopped: true},
		"earliest of two":    {stops: []string{"cd", "b"}, pieces: []string{"abcd"}, want: []string{"a"}, stopped: true},
		"held at end":        {stops: []string{"END"}, pieces: []string{"aEN"}, want: []string{"a"}, flush: "EN"},
		"utf8 split":         {pieces: []string{"\xc3", "\xa9!"}, want: []string{"", "é!"}},
		"utf8 3 bytes":       {pieces: []string{"\xe2\x82", "\xac"}, want: []string{"", "€"}},
		"stop at start":      {stops: []string{"a"}, pieces: []string{"abc"}, want: []string{""}, stopped: true},
		"after stop nothing": {stops: []string{"b"}, pieces: []string{"ab", "c"}, want: []string{"a", ""}, stopped: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ts := textStream{stops: tc.stops}
			var stopped bool
			for i, p := range tc.pieces {
				var out string
				out, stopped = ts.push(p)
				require.Equal(t, tc.want[i], out, "push %d", i)
			}
			require.Equal(t, tc.stopped, stopped)
			require.Equal(t, tc.flush, ts.flush())
		})
	}
}
