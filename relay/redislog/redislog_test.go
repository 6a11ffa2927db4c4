package redislog

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/internal/redistest"
)

func TestRecordAndRead(t *testing.T) {
	rs := redistest.Start(t)
	l, err := New(Config{URL: rs.URL(), MaxEvents: 1000, TTL: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- l.Run(ctx) }()

	m := l.Mirror("req-1", "acme", "openai")
	for n := range 10 {
		m.Append(n, []byte("data: "+strconv.Itoa(n)+"\n\n"))
	}
	m.End()
	// A stream with a hole at event 3 (an event lost on the way).
	g := l.Mirror("req-2", "acme", "native")
	for n := range 6 {
		if n != 3 {
			g.Append(n, []byte("e"+strconv.Itoa(n)))
		}
	}
	g.End()
	cancel() // Run writes what is queued before it returns
	require.NoError(t, <-stopped)

	rec, err := l.Read(context.Background(), "req-1")
	require.NoError(t, err)
	require.Equal(t, "acme", rec.Tenant)
	require.Equal(t, "openai", rec.Style)
	require.True(t, rec.Done)
	require.Zero(t, rec.First)
	require.Len(t, rec.Events, 10)
	require.Equal(t, "data: 9\n\n", string(rec.Events[9]))

	rec, err = l.Read(context.Background(), "req-2")
	require.NoError(t, err)
	require.Equal(t, "native", rec.Style)
	require.False(t, rec.Done, "a stream with a gap did not end as far as a reader knows")
	require.Len(t, rec.Events, 3)

	_, err = l.Read(context.Background(), "nothing")
	require.ErrorIs(t, err, ErrNotFound)
	ttl, err := l.rdb.TTL(context.Background(), evKey("req-1")).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 50*time.Second)
}
