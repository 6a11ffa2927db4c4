package cluster

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRouteZones: the entry node's zone first, even against a longer
// prefix elsewhere; out of it (marked cross-zone) when every member of it
// is over the load bound, or none serves the model.
func TestRouteZones(t *testing.T) {
	t.Parallel()
	p := chain(3, 8)
	zoned := func(m Member, zone string) Member {
		m.Zone = zone
		return m
	}
	members := []Member{
		zoned(pooled("a", 0, p, 1), "eu"),
		zoned(pooled("b", 0, p), "eu"),
		zoned(pooled("c", 0, p, 1, 2, 4, 8), "us"),
	}
	req := RouteRequest{Model: "m", Prefix: p, Zone: "eu"}
	got := RouteMembers(members, req, nil)
	require.Equal(t, []pick{{"a", "prefix:1"}, {"b", "affinity"}, {"c", "least_loaded"}}[:1], picks(got)[:1])
	require.False(t, got[0].CrossZone)
	require.Equal(t, "c", got[len(got)-1].Member.ID)
	require.True(t, got[len(got)-1].CrossZone)

	// Without a zone, the longest prefix wins.
	require.Equal(t, "c", RouteMembers(members, RouteRequest{Model: "m", Prefix: p}, nil)[0].Member.ID)

	// Every member of eu is over the bound: us first, cross-zone.
	busy := []Member{
		zoned(pooled("a", 40, p, 1), "eu"),
		zoned(pooled("b", 40, p), "eu"),
		zoned(pooled("c", 0, p), "us"),
	}
	got = RouteMembers(busy, req, nil)
	require.Equal(t, "c", got[0].Member.ID)
	require.True(t, got[0].CrossZone)
	require.Len(t, got, 3, "the zone's members stay, for retries")

	// One member of eu under the bound keeps the request in eu.
	busy[1] = zoned(pooled("b", 0, p), "eu")
	got = RouteMembers(busy, req, nil)
	require.Equal(t, "b", got[0].Member.ID)
	require.False(t, got[0].CrossZone)

	// No member of the zone serves the model.
	got = RouteMembers(members, RouteRequest{Model: "m", Zone: "ap"}, nil)
	require.Len(t, got, 3)
	for _, c := range got {
		require.True(t, c.CrossZone)
	}
}

// TestMetaZone: a zone travels in the metadata (format 2); a node without
// one writes format 1, which older nodes read.
func TestMetaZone(t *testing.T) {
	t.Parallel()
	m := nodeMeta{ID: "n1", APIAddr: "127.0.0.1:8700", Version: "v", Models: []string{"m"}, Zone: "eu-west-1a"}
	b := m.encode()
	require.Equal(t, metaFormatZone, b[0])
	got, err := decodeMeta("n1", b)
	require.NoError(t, err)
	require.Equal(t, m, *got)
	m.Zone = ""
	b = m.encode()
	require.Equal(t, metaFormat, b[0])
	got, err = decodeMeta("n1", b)
	require.NoError(t, err)
	require.Empty(t, got.Zone)
	// Format 2 without its zone is malformed.
	b[0] = metaFormatZone
	_, err = decodeMeta("n1", b)
	require.Error(t, err)
}
