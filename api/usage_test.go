package api

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUsageRowAddCounts(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		a, b, want UsageRow
	}{
		"counts add up": {
			a:    UsageRow{Requests: 1, Cancelled: 2, Errors: 3, Rejected: 4, InputTokens: 5, CachedTokens: 6, OutputTokens: 7},
			b:    UsageRow{Requests: 10, Cancelled: 20, Errors: 30, Rejected: 40, InputTokens: 50, CachedTokens: 60, OutputTokens: 70},
			want: UsageRow{Requests: 11, Cancelled: 22, Errors: 33, Rejected: 44, InputTokens: 55, CachedTokens: 66, OutputTokens: 77},
		},
		"means weighted by finished": {
			a:    UsageRow{Finished: 1, MeanTTFTMs: 100, MeanITLMs: 10},
			b:    UsageRow{Finished: 3, MeanTTFTMs: 200, MeanITLMs: 30},
			want: UsageRow{Finished: 4, MeanTTFTMs: 175, MeanITLMs: 25},
		},
		"into an empty row": {
			b:    UsageRow{Finished: 2, MeanTTFTMs: 50, MeanITLMs: 5},
			want: UsageRow{Finished: 2, MeanTTFTMs: 50, MeanITLMs: 5},
		},
		"a row without finished requests leaves the means": {
			a:    UsageRow{Finished: 2, MeanTTFTMs: 50, MeanITLMs: 5},
			b:    UsageRow{Requests: 3, Errors: 3},
			want: UsageRow{Requests: 3, Errors: 3, Finished: 2, MeanTTFTMs: 50, MeanITLMs: 5},
		},
		"key and cost are not touched": {
			a:    UsageRow{Key: "a", Cost: new(1.0)},
			b:    UsageRow{Key: "b", Cost: new(2.0)},
			want: UsageRow{Key: "a", Cost: new(1.0)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := tc.a
			got.AddCounts(tc.b)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestUsageRowCostPerMillionTokens(t *testing.T) {
	t.Parallel()
	require.Nil(t, UsageRow{InputTokens: 10}.CostPerMillionTokens(), "no cost")
	require.Nil(t, UsageRow{Cost: new(0.0)}.CostPerMillionTokens(), "no tokens")
	got := UsageRow{InputTokens: 1500, CachedTokens: 500, OutputTokens: 500, Cost: new(0.01)}.CostPerMillionTokens()
	require.NotNil(t, got)
	require.InDelta(t, 5.0, *got, 1e-12, "0.01 for 2,000 tokens")
}
