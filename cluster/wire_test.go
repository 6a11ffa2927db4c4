package cluster

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/engine/kvcache"
)

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	st := State{
		Load: map[string]ModelLoad{
			"small": {Running: 3, Waiting: 7, KVUsage: 0.5, TokensPerSecond: 1234.5},
			"big":   {Running: 1},
		},
		Prefixes: map[string][]kvcache.Hash{"small": chain(1, 40), "other": chain(2, 3)},
		Draining: true,
	}
	v := version{Epoch: 1 << 60, Seq: 42}
	stRec, sumRec := stateRecords("node-a", v, st, BroadcastPrefixKeys)

	// Models sorted, union of Load and Prefixes; summary keeps every key.
	require.Len(t, stRec.Models, 3)
	assert.Equal(t, []string{"big", "other", "small"}, []string{stRec.Models[0].Name, stRec.Models[1].Name, stRec.Models[2].Name})
	assert.Equal(t, flagDraining, stRec.Flags)
	assert.Len(t, sumRec.Models[2].Keys, 40)
	assert.Equal(t, prefixKey(st.Prefixes["small"][39]), sumRec.Models[2].Keys[39])
	// The broadcast keys are dealt in turn: other gets its 3, small the rest.
	assert.Len(t, stRec.Models[1].Keys, 3)
	assert.Len(t, stRec.Models[2].Keys, BroadcastPrefixKeys-3)

	for _, r := range []*record{stRec, sumRec} {
		b := appendRecord(nil, r)
		got, err := decodeRecord(b)
		require.NoError(t, err)
		assert.Equal(t, r.Kind, got.Kind)
		assert.Equal(t, r.Node, got.Node)
		assert.Equal(t, r.Version, got.Version)
		assert.Equal(t, r.Flags, got.Flags)
		require.Len(t, got.Models, len(r.Models))
		for i := range r.Models {
			assert.Equal(t, r.Models[i].Name, got.Models[i].Name)
			assert.Equal(t, r.Models[i].Load.Running, got.Models[i].Load.Running)
			assert.InDelta(t, r.Models[i].Load.TokensPerSecond, got.Models[i].Load.TokensPerSecond, 0.01)
			assert.Equal(t, len(r.Models[i].Keys), len(got.Models[i].Keys))
		}
		kind, node, ver, ok := peekHeader(b)
		require.True(t, ok)
		assert.Equal(t, r.Kind, kind)
		assert.Equal(t, "node-a", node)
		assert.Equal(t, v, ver)
	}

	pp := encodePushPull([]*record{stRec, sumRec})
	recs, err := decodePushPull(pp)
	require.NoError(t, err)
	require.Len(t, recs, 2)
	assert.Equal(t, kindSummary, recs[1].Kind)
}

// TestGossipFitsUDP: however big the state, a gossip message stays within
// MaxBroadcastBytes, under memberlist's UDP packet less its overheads.
func TestGossipFitsUDP(t *testing.T) {
	t.Parallel()
	st := State{Load: map[string]ModelLoad{}, Prefixes: map[string][]kvcache.Hash{}}
	for i := range 100 {
		name := fmt.Sprintf("%s-%03d", strings.Repeat("model", 20), i)
		st.Load[name] = ModelLoad{Running: 1 << 40, Waiting: -5, KVUsage: 2e300, TokensPerSecond: -1}
		st.Prefixes[name] = chain(int32(i), 2000)
	}
	stRec, sumRec := stateRecords("n", version{1, 1}, st, BroadcastPrefixKeys)
	require.Len(t, stRec.Models, maxModels)
	for _, m := range sumRec.Models {
		require.Len(t, m.Keys, MaxPrefixKeys)
	}
	b := encodeGossip(stRec)
	assert.LessOrEqual(t, len(b), MaxBroadcastBytes)
	assert.Less(t, MaxBroadcastBytes, 1400-100, "room for memberlist's headers and encryption")
	r, err := decodeGossip(b)
	require.NoError(t, err, "a trimmed message still decodes")
	assert.Equal(t, maxCount-1, r.Models[0].Load.Running, "counts clamped")
	assert.Zero(t, r.Models[0].Load.Waiting)

	// A small state is not trimmed and carries the capped keys.
	small, _ := stateRecords("n", version{1, 1}, State{Prefixes: map[string][]kvcache.Hash{"m": chain(1, 100)}}, BroadcastPrefixKeys)
	r, err = decodeGossip(encodeGossip(small))
	require.NoError(t, err)
	assert.Len(t, r.Models[0].Keys, BroadcastPrefixKeys)
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	good := appendRecord(nil, &record{Kind: kindState, Node: "a", Version: version{1, 2},
		Models: []modelRecord{{Name: "m", Keys: []uint64{1, 2}}}})
	_, err := decodeGossip(good)
	require.NoError(t, err)

	dup := appendRecord(nil, &record{Kind: kindState, Node: "a", Version: version{1, 2},
		Models: []modelRecord{{Name: "m"}, {Name: "m"}}})
	nan := bytes.Clone(good)
	copy(nan[len(nan)-8-8-1-8:], []byte{0, 0, 0xc0, 0x7f}) // KVUsage = NaN
	cases := map[string][]byte{
		"empty":          nil,
		"unknown kind":   append([]byte{9}, good[1:]...),
		"truncated":      good[:len(good)-1],
		"trailing bytes": append(bytes.Clone(good), 0),
		"empty node":     {kindState, 0, 1, 1, 0, 0},
		"unknown flags":  {kindState, 1, 'a', 1, 1, 0x80, 0},
		"huge key count": {kindSummary, 1, 'a', 1, 1, 1, 1, 'm', 0xff, 0xff, 0xff, 0xff, 0x0f},
		"huge models":    {kindSummary, 1, 'a', 1, 1, 0xff, 0xff, 0x03},
		"duplicate":      dup,
		"nan load":       nan,
		"summary gossip": appendRecord(nil, &record{Kind: kindSummary, Node: "a", Version: version{1, 1}}),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := decodeGossip(b)
			require.ErrorIs(t, err, errMalformed)
		})
	}
	for name, b := range map[string][]byte{
		"empty":         nil,
		"wrong kind":    good,
		"huge count":    {kindPushPull, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"short record":  {kindPushPull, 1, 50, kindState},
		"trailing":      append(encodePushPull(nil), 1),
		"bad record":    {kindPushPull, 1, 3, kindState, 0, 0},
		"count too big": {kindPushPull, 2, byte(len(good))},
	} {
		t.Run("pushpull "+name, func(t *testing.T) {
			_, err := decodePushPull(b)
			require.ErrorIs(t, err, errMalformed)
		})
	}
}

func TestMetaRoundTripAndSize(t *testing.T) {
	t.Parallel()
	m := nodeMeta{ID: "node-1", APIAddr: "10.0.0.1:8080", Version: "v0.1.0", Models: []string{"small", "big"}}
	b := m.encode()
	got, err := decodeMeta("node-1", b)
	require.NoError(t, err)
	assert.Equal(t, &m, got)

	_, err = decodeMeta("node-2", b)
	require.ErrorIs(t, err, errMalformed, "id must be the memberlist name")
	_, err = decodeMeta("node-1", b[:len(b)-1])
	require.ErrorIs(t, err, errMalformed)
	_, err = decodeMeta("node-1", append([]byte{3}, b[1:]...))
	require.ErrorIs(t, err, errMalformed, "unknown format")

	// Metadata over 512 bytes is an error from Validate and New, never a
	// panic in NodeMeta.
	cfg := testConfig("big")
	for i := range 40 {
		cfg.Models = append(cfg.Models, fmt.Sprintf("a-rather-long-model-name-%02d", i))
	}
	require.ErrorIs(t, cfg.Validate(), ErrMetaTooLarge)
	_, err = New(cfg)
	require.ErrorIs(t, err, ErrMetaTooLarge)

	cfg.Models = cfg.Models[:10]
	require.NoError(t, cfg.Validate())
	var d delegate
	d.c = &Cluster{meta: bytes.Repeat([]byte{1}, 100)}
	assert.Nil(t, d.NodeMeta(50), "never more than the limit")
	assert.Len(t, d.NodeMeta(memberlist.MetaMaxSize), 100)
}

// FuzzDecode feeds arbitrary bytes to every decoder: none may panic, and
// whatever decodes must re-encode to the same bytes. The seed corpus is in
// testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	st := State{
		Load:     map[string]ModelLoad{"m": {Running: 2, Waiting: 1, KVUsage: 0.25, TokensPerSecond: 10}},
		Prefixes: map[string][]kvcache.Hash{"m": chain(1, 3)},
	}
	stRec, sumRec := stateRecords("a", version{5, 6}, st, BroadcastPrefixKeys)
	f.Add(appendRecord(nil, stRec))
	f.Add(appendRecord(nil, sumRec))
	f.Add(encodePushPull([]*record{stRec, sumRec}))
	f.Add((&nodeMeta{ID: "a", APIAddr: "x:1", Models: []string{"m"}}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := decodeRecord(b); err == nil {
			if !bytes.Equal(appendRecord(nil, r), b) {
				t.Fatalf("record does not re-encode to its bytes")
			}
		}
		_, _ = decodeGossip(b)
		if recs, err := decodePushPull(b); err == nil && !bytes.Equal(encodePushPull(recs), b) {
			t.Fatalf("push/pull does not re-encode to its bytes")
		}
		if m, err := decodeMeta("a", b); err == nil && !bytes.Equal(m.encode(), b) {
			t.Fatalf("meta does not re-encode to its bytes")
		}
		_, _, _, _ = peekHeader(b)
		// Merging hostile records must not panic either.
		c := newCluster(testConfig("self"), nil)
		d := &delegate{c}
		d.NotifyMsg(b)
		d.MergeRemoteState(b, false)
		_ = c.Members()
		_ = c.Route(RouteRequest{Model: "m", Prefix: chain(1, 3)}, nil)
	})
}

// TestWaitingByTierRoundTrip: each tier's waiting count travels in a
// state record; a record from a node with more tiers keeps the first four.
func TestWaitingByTierRoundTrip(t *testing.T) {
	t.Parallel()
	st := State{Load: map[string]ModelLoad{"m": {Waiting: 10, WaitingByTier: [NumTiers]int{1, 2, 3, 4}}}}
	state, _ := stateRecords("n", version{Epoch: 1, Seq: 1}, st, 0)
	r, err := decodeGossip(encodeGossip(state))
	require.NoError(t, err)
	require.Equal(t, [NumTiers]int{1, 2, 3, 4}, r.Models[0].Load.WaitingByTier)

	e := encoder{}
	e.byte(kindState)
	e.str("n")
	e.uvarint(1)
	e.uvarint(1)
	e.byte(0)
	e.uvarint(1)
	e.str("m")
	e.uvarint(0)
	e.uvarint(15)
	e.f32(0)
	e.f32(0)
	e.uvarint(5)
	for _, w := range []uint64{1, 2, 3, 4, 5} {
		e.uvarint(w)
	}
	e.keys(nil)
	r, err = decodeRecord(e.b)
	require.NoError(t, err)
	require.Equal(t, [NumTiers]int{1, 2, 3, 4}, r.Models[0].Load.WaitingByTier)
}

// TestLoadCountersCompat: the queued prompt tokens, the prefill rate and
// the block size travel as load counters after the tiers, so that a node
// of the previous format (which reads every counter and keeps the first
// four) still decodes a newer record, and a newer node reads an older
// record's load with these unset. Counters past those known are kept, and
// a record re-encodes to its bytes.
func TestLoadCountersCompat(t *testing.T) {
	t.Parallel()
	l := ModelLoad{Running: 2, Waiting: 5, KVUsage: 0.5, WaitingByTier: [NumTiers]int{1, 0, 4, 0},
		QueuedPromptTokens: 12345, PrefillTokensPerSecond: 6543.4, BlockTokens: 16}
	state, _ := stateRecords("n", version{Epoch: 1, Seq: 1}, State{Load: map[string]ModelLoad{"m": l},
		Prefixes: map[string][]kvcache.Hash{"m": chain(1, 3)}}, BroadcastPrefixKeys)
	b := encodeGossip(state)
	r, err := decodeGossip(b)
	require.NoError(t, err)
	got := r.Models[0].Load
	want := l
	want.PrefillTokensPerSecond = 6543
	assert.Equal(t, want, got)

	// The previous format's decoder, for one model's part.
	prev := func(b []byte) (tiers [NumTiers]int, keys int) {
		d := decoder{b: b}
		d.byte()
		d.str(maxNodeIDBytes)
		d.uvarint()
		d.uvarint()
		d.byte()
		require.Equal(t, 1, d.count(maxModels, 2))
		d.str(maxModelNameBytes)
		d.uvarint()
		d.uvarint()
		d.f32()
		d.f32()
		n := d.count(64, 1)
		for i := range n {
			w := d.uvarint()
			if i < NumTiers {
				tiers[i] = int(w)
			}
		}
		keys = len(d.keys())
		require.NoError(t, d.err)
		require.Empty(t, d.b)
		return tiers, keys
	}
	tiers, keys := prev(b)
	assert.Equal(t, l.WaitingByTier, tiers)
	assert.Equal(t, 3, keys)

	// An older record (four counters) decodes with the new fields unset,
	// and re-encodes to its bytes.
	old := encoder{}
	old.byte(kindState)
	old.str("n")
	old.uvarint(1)
	old.uvarint(1)
	old.byte(0)
	old.uvarint(1)
	old.str("m")
	old.uvarint(2)
	old.uvarint(5)
	old.f32(0.5)
	old.f32(0)
	old.uvarint(NumTiers)
	for _, w := range []uint64{1, 0, 4, 0} {
		old.uvarint(w)
	}
	old.keys(nil)
	r, err = decodeGossip(old.b)
	require.NoError(t, err)
	assert.Equal(t, ModelLoad{Running: 2, Waiting: 5, KVUsage: 0.5, WaitingByTier: [NumTiers]int{1, 0, 4, 0}}, r.Models[0].Load)
	assert.Equal(t, old.b, appendRecord(nil, r))

	// A newer record with two more counters: kept aside, re-encoded.
	newer := encoder{b: bytes.Clone(old.b[:len(old.b)-1-1-NumTiers])}
	newer.uvarint(knownCounters + 2)
	for _, w := range []uint64{1, 0, 4, 0, 7, 8, 16, 0, 9} {
		newer.uvarint(w)
	}
	newer.keys(nil)
	r, err = decodeGossip(newer.b)
	require.NoError(t, err)
	assert.Equal(t, 7, r.Models[0].Load.QueuedPromptTokens)
	assert.Equal(t, 16, r.Models[0].Load.BlockTokens)
	assert.Equal(t, newer.b, appendRecord(nil, r))

	// A trailing zero counter is not the one encoding; too few counters
	// are malformed.
	for name, counters := range map[string][]uint64{"trailing zero": {1, 0, 4, 0, 7, 0}, "three": {1, 0, 4}} {
		bad := encoder{b: bytes.Clone(old.b[:len(old.b)-1-1-NumTiers])}
		bad.uvarint(uint64(len(counters)))
		for _, w := range counters {
			bad.uvarint(w)
		}
		bad.keys(nil)
		_, err := decodeGossip(bad.b)
		require.ErrorIs(t, err, errMalformed, name)
	}
}
