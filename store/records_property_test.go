package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// modelNode is a node of the merge model: the records it holds and its
// clock, changed only through resolve and hlc, as Store.Apply does.
type modelNode struct {
	name  string
	recs  map[string]Record
	clock hlc
	now   int64
}

func recKey(r Record) string { return string(r.Kind) + "/" + r.ID }

// local makes a local change and returns its record.
func (n *modelNode) local(kind RecordKind, id string, deleted bool, payload any) Record {
	b, _ := json.Marshal(payload)
	var floor Version
	if cur, ok := n.recs[string(kind)+"/"+id]; ok {
		floor = cur.Version
	}
	r := Record{Kind: kind, ID: id, Version: n.clock.next(n.now, floor, n.name), Deleted: deleted, Payload: b}
	n.recs[recKey(r)] = r
	return r
}

// apply merges in as Store.Apply does and returns what changed.
func (n *modelNode) apply(t *rapid.T, in Record) (Record, bool) {
	var cur *Record
	if r, ok := n.recs[recKey(in)]; ok {
		cur = &r
	}
	n.clock.witness(in.Version)
	next, act, err := resolve(cur, in)
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	switch act {
	case keep:
		return Record{}, false
	case reissue:
		floor := in.Version
		if cur.Version.After(floor) {
			floor = cur.Version
		}
		next.Version = n.clock.next(n.now, floor, n.name)
	}
	n.recs[recKey(next)] = next
	return next, true
}

// TestMergeConverges: whatever the local changes (grants, re-imports and
// revocations of the same keys on different nodes, quota overrides and
// their tombstones) and whatever the delivery (any order, duplicated,
// old records late), once every node has received every other's records
// the nodes hold the same records, and every key revoked anywhere is
// revoked everywhere.
func TestMergeConverges(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		nodes := make([]*modelNode, rapid.IntRange(2, 4).Draw(t, "nodes"))
		for i := range nodes {
			nodes[i] = &modelNode{name: fmt.Sprintf("node-%d", i), recs: map[string]Record{},
				now: rapid.Int64Range(0, 5).Draw(t, "skew")}
		}
		keyIDs := []string{"llmd-aaaaaaa", "llmd-bbbbbbb"}
		var network []Record // every record ever sent, redelivered at will
		revoked := map[string]bool{}
		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for range steps {
			n := nodes[rapid.IntRange(0, len(nodes)-1).Draw(t, "node")]
			n.now += rapid.Int64Range(0, 2).Draw(t, "tick")
			id := rapid.SampledFrom(keyIDs).Draw(t, "key")
			switch rapid.IntRange(0, 4).Draw(t, "op") {
			case 0: // create or import a key this node does not hold
				if _, ok := n.recs["key/"+id]; !ok {
					p := keyPayload{Tenant: "acme", Hash: fmt.Sprintf("%064x", len(id)), Name: n.name, Created: n.now}
					network = append(network, n.local(RecordKey, id, false, p))
				}
			case 1: // revoke a key this node holds
				if r, ok := n.recs["key/"+id]; ok {
					var p keyPayload
					_ = json.Unmarshal(r.Payload, &p)
					if p.Revoked == 0 {
						p.Revoked = n.now + 1
						network = append(network, n.local(RecordKey, id, false, p))
						revoked[id] = true
					}
				}
			case 2: // set or clear a quota override
				v := rapid.Int64Range(-1, 3).Draw(t, "rpm")
				var p quotaPayload
				if v >= 0 {
					p.RPM = &v
				}
				network = append(network, n.local(RecordQuota, "acme", v < 0, p))
			default: // deliver a record sent earlier, perhaps again
				if len(network) == 0 {
					continue
				}
				in := network[rapid.IntRange(0, len(network)-1).Draw(t, "msg")]
				if next, ok := n.apply(t, in); ok {
					network = append(network, next)
				}
			}
		}
		// Anti-entropy (push/pull) until nothing changes.
		for round := 0; ; round++ {
			if round > 2*len(nodes)+2 {
				t.Fatalf("no convergence after %d rounds", round)
			}
			changed := false
			for _, from := range nodes {
				for _, to := range nodes {
					for _, r := range from.recs {
						if _, ok := to.apply(t, r); ok {
							changed = true
						}
					}
				}
			}
			if !changed {
				break
			}
		}
		for _, n := range nodes[1:] {
			if !maps.EqualFunc(nodes[0].recs, n.recs, func(a, b Record) bool {
				return a.Version == b.Version && a.Deleted == b.Deleted && string(a.Payload) == string(b.Payload)
			}) {
				t.Fatalf("%s and %s differ:\n%v\n%v", nodes[0].name, n.name, nodes[0].recs, n.recs)
			}
		}
		for _, id := range keyIDs {
			r, ok := nodes[0].recs["key/"+id]
			if !ok {
				continue
			}
			var p keyPayload
			_ = json.Unmarshal(r.Payload, &p)
			if (p.Revoked != 0) != revoked[id] {
				t.Fatalf("key %s: revoked %v, want %v", id, p.Revoked != 0, revoked[id])
			}
		}
	})
}

// TestStoresConverge runs a few random histories like TestMergeConverges on
// real stores: three SQLite databases exchanging records through Apply.
func TestStoresConverge(t *testing.T) {
	t.Parallel()
	for seed := range 4 {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			stores := make([]*Store, 3)
			clocks := make([]*fakeClock, 3)
			for i := range stores {
				stores[i], clocks[i] = newNode(t, fmt.Sprintf("node-%d", i))
			}
			var network []Record
			for _, s := range stores {
				s.OnChange(func(recs []Record) { network = append(network, recs...) })
			}
			rng := rand.New(rand.NewPCG(uint64(seed), 25))
			secrets := map[string]string{} // key id -> secret
			var revokedIDs []string
			for range 80 {
				i := rng.IntN(len(stores))
				s := stores[i]
				clocks[i].Add(time.Duration(rng.IntN(3)) * time.Millisecond)
				switch rng.IntN(5) {
				case 0:
					secret, k, err := s.CreateKey(ctx, "acme-"+fmt.Sprint(rng.IntN(2)), false, "")
					if err == nil {
						secrets[k.ID] = secret
					}
				case 1:
					for id := range secrets {
						if _, err := s.RevokeKey(ctx, id); err == nil {
							revokedIDs = append(revokedIDs, id)
						}
						break
					}
				case 2:
					rpm := int64(rng.IntN(4)) - 1
					_, err := s.UpdateQuota(ctx, "acme-0", QuotaUpdate{RPM: &rpm})
					require.NoError(t, err)
				case 3:
					_, err := s.EnsureTenant(ctx, "acme-"+fmt.Sprint(rng.IntN(2)), Tiers[rng.IntN(len(Tiers))])
					require.NoError(t, err)
				default:
					if len(network) > 0 {
						_, err := s.Apply(ctx, []Record{network[rng.IntN(len(network))]})
						require.NoError(t, err)
					}
				}
			}
			exchangeAll(ctx, t, stores)
			want, err := stores[0].Records(ctx)
			require.NoError(t, err)
			for _, s := range stores[1:] {
				got, err := s.Records(ctx)
				require.NoError(t, err)
				require.Equal(t, want, got)
			}
			for _, s := range stores {
				for _, id := range revokedIDs {
					_, err := s.Authenticate(ctx, secrets[id])
					require.ErrorIs(t, err, ErrBadKey)
				}
				q0, err := stores[0].Quotas(ctx)
				require.NoError(t, err)
				q, err := s.Quotas(ctx)
				require.NoError(t, err)
				require.Equal(t, q0, q)
			}
		})
	}
}

// exchangeAll applies every store's records to every other until nothing
// changes.
func exchangeAll(ctx context.Context, t *testing.T, stores []*Store) {
	t.Helper()
	for round := 0; round < 10; round++ {
		changed := false
		for _, from := range stores {
			recs, err := from.Records(ctx)
			require.NoError(t, err)
			for _, to := range stores {
				got, err := to.Apply(ctx, recs)
				require.NoError(t, err)
				changed = changed || len(got) > 0
			}
		}
		if !changed {
			return
		}
	}
	t.Fatal("the stores did not converge in 10 rounds")
}
