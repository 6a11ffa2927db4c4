package quota

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Hot tenants: a tenant whose Limits.Shards is n > 1 has each of its Redis
// buckets split into n sub-buckets, each its own keys with its own hash tag
// ({tenant/i}), so that in a Redis Cluster they land on different slots and
// no one key takes all the tenant's traffic. See "Hot tenants" in the
// package doc for the rules and the bound.

// shardKeys are the keys of sub-bucket i of tenant. Their prefix differs
// from the whole bucket's (llmd:q:), so no tenant's keys can meet them.
func shardKeys(tenant string, i int) []string {
	p := "llmd:qs:{" + tenant + "/" + strconv.Itoa(i) + "}:"
	return []string{p + "s", p + "r", p + "e"}
}

// shards is the number of sub-buckets l splits into: Shards, but no more
// than any limit that is set, so that no sub-bucket's share of a limit is 0
// (which would mean unlimited). 1 means the whole bucket.
func (l Limits) shards() int {
	n := int64(l.Shards)
	for _, v := range [...]int64{l.RPM, l.TPM, l.Concurrency, l.DailyTokens} {
		if v > 0 {
			n = min(n, v)
		}
	}
	return int(max(1, n))
}

// share is part i of v split n ways: v/n, plus one for each of the first
// v mod n parts, so the parts add up to v exactly; 0 (unlimited) stays 0.
func share(v int64, n, i int) int64 {
	if v == 0 {
		return 0
	}
	s := v / int64(n)
	if int64(i) < v%int64(n) {
		s++
	}
	return s
}

// shard is sub-bucket i's limits, of n.
func (l Limits) shard(n, i int) Limits {
	return Limits{RPM: share(l.RPM, n, i), TPM: share(l.TPM, n, i), Concurrency: share(l.Concurrency, n, i),
		DailyTokens: share(l.DailyTokens, n, i)}
}

// layout is how a split tenant's sub-buckets are laid out: n of them,
// marked by the operator (hot nil: llmd:qs:{tenant/i}, starting full) or
// detected by the request rate (hotKeys, starting with their part of the
// split's balance).
type layout struct {
	n   int
	hot *split
}

// keys are sub-bucket i's keys.
func (y layout) keys(tenant string, i int) []string {
	if y.hot == nil {
		return shardKeys(tenant, i)
	}
	return hotKeys(tenant, y.hot.at, i)
}

// name is sub-bucket i's name in logs and reset detection.
func (y layout) name(tenant string, i int) string {
	if y.hot == nil {
		return tenant + "/" + strconv.Itoa(i)
	}
	return tenant + "/" + strconv.FormatInt(y.hot.at, 10) + "/" + strconv.Itoa(i)
}

// init is sub-bucket i's starting state for the scripts (reserve.lua's
// ARGV 10-14, usage.lua's 3-7): none for a marked layout.
func (y layout) init(i int) initState {
	if y.hot == nil {
		return initState{}
	}
	p := y.hot.parts[i]
	return initState{at: y.hot.at, rb: p.rb, tb: p.tb, day: p.day, used: p.used}
}

// usable reports whether sub-bucket i can take requests under l (always,
// when marked: n was lowered to fit the limits).
func (y layout) usable(l Limits, i int) bool { return y.hot == nil || usable(l, y.n, i) }

// piece is the part of a sharded reservation held in one sub-bucket.
type piece struct {
	shard        int
	tokens, over int64
}

// shardBook remembers which sub-buckets hold each sharded reservation this
// limiter made, for its Reconcile. An entry outlives the reservation's TTL
// by a minute, then is dropped (the reservation expired in Redis, charged
// as reserved).
//
// Locking: mu guards every field.
type shardBook struct {
	mu        sync.Mutex
	held      map[string]booked
	ttl       time.Duration
	nextSweep time.Time
}

type booked struct {
	lay     layout // the tenant's sub-buckets when reserved
	pieces  []piece
	expires time.Time
}

func newShardBook(ttl time.Duration) *shardBook {
	return &shardBook{held: make(map[string]booked), ttl: ttl + time.Minute}
}

func bookKey(tenant, id string) string { return tenant + "\x00" + id }

func (b *shardBook) put(tenant, id string, lay layout, pieces []piece, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.After(b.nextSweep) {
		for k, e := range b.held {
			if now.After(e.expires) {
				delete(b.held, k)
			}
		}
		b.nextSweep = now.Add(b.ttl / 4)
	}
	b.held[bookKey(tenant, id)] = booked{lay: lay, pieces: pieces, expires: now.Add(b.ttl)}
}

// take removes and returns the entry of tenant's reservation id.
func (b *shardBook) take(tenant, id string) (booked, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := bookKey(tenant, id)
	e, ok := b.held[k]
	delete(b.held, k)
	return e, ok
}

// reserveSharded is Reserve for a tenant split into lay.n sub-buckets: it
// tries the sub-buckets one after another from a round-robin start until
// one admits the whole request; when none can, and only tokens stood in
// the way (the TPM bucket or the day's budget), it borrows: the request is
// split over several sub-buckets (reserveSplit). An error means Redis
// failed.
func (r *Redis) reserveSharded(ctx context.Context, req *Request, lay layout) (Decision, error) {
	n := lay.n
	start := int(r.rr.Add(1) % uint64(n))
	var deny outcome
	denied, tokensOnly := false, true
	for k := range n {
		i := (start + k) % n
		if !lay.usable(req.Limits, i) {
			continue
		}
		sub := *req
		sub.Limits = req.Limits.shard(n, i)
		res, err := r.runReserve(ctx, lay.keys(req.Tenant, i), &sub, lay.init(i), hotArgs{})
		if err != nil {
			return Decision{}, err
		}
		o := res.outcome
		r.observeState(lay.name(req.Tenant, i), o.created)
		switch {
		case o.code == codeDuplicate:
			return Decision{}, ErrDuplicateID
		case o.code == codeAllowed:
			r.book.put(req.Tenant, req.ID, lay, []piece{{shard: i, tokens: req.Tokens, over: req.most() - req.Tokens}}, r.now())
			return shardDecision(o, req, n), nil
		}
		if o.code != codeTokens && o.code != codeTooLarge && o.code != codeDailyTokens {
			tokensOnly = false // requests or concurrency: no piece can help
		}
		// Keep the refusal that passes soonest (a hard one only when all
		// are hard).
		if !denied || betterDenial(o, deny) {
			deny, denied = o, true
		}
	}
	if tokensOnly && (req.Limits.TPM == 0 || req.Tokens <= req.Limits.TPM) &&
		(req.Limits.DailyTokens == 0 || req.Tokens <= req.Limits.DailyTokens) {
		d, ok, err := r.reserveSplit(ctx, req, lay)
		if err != nil || ok {
			return d, err
		}
	}
	if deny.code == codeTooLarge && req.Tokens <= req.Limits.TPM {
		// Larger than one sub-bucket, not than the tenant's limit: it waits
		// for the others to refill.
		deny.code, deny.retryMs = codeTokens, max(deny.retryMs, ConcurrencyRetryAfter.Milliseconds())
	}
	return shardDecision(deny, req, n), nil
}

// betterDenial reports whether a is a more useful refusal to report than
// b: soft before hard, then the sooner retry.
func betterDenial(a, b outcome) bool {
	ah, bh := a.code == codeTooLarge || a.code == codeDailyTokens, b.code == codeTooLarge || b.code == codeDailyTokens
	if ah != bh {
		return !ah
	}
	return a.retryMs < b.retryMs
}

// shardDecision is the Decision for req from one sub-bucket's outcome: the
// limits are the tenant's; the remaining counts are the sub-bucket's times
// n, an estimate of the tenant's.
func shardDecision(o outcome, req *Request, n int) Decision {
	d := o.decision(req)
	d.RemainingRequests *= int64(n)
	d.RemainingTokens *= int64(n)
	if d.RemainingRequests > d.LimitRequests {
		d.RemainingRequests = d.LimitRequests
	}
	if d.RemainingTokens > d.LimitTokens {
		d.RemainingTokens = d.LimitTokens
	}
	return d
}

// reserveSplit borrows across sub-buckets for a request that no one
// sub-bucket could hold: it reads every sub-bucket's balance and, when
// they hold the request together, reserves it in pieces, the largest
// balances first. The first piece also takes the request (RPM) and is
// checked against its sub-bucket's concurrency, and carries the potential
// overage; the others take tokens only, but each is held in its
// sub-bucket's reservations until settled, so it counts there as in flight
// (conservative: a borrowed request may hold a slot in each sub-bucket it
// borrowed from). A piece refused (another node took the tokens
// meanwhile) gives back the pieces already taken. ok reports an admission.
func (r *Redis) reserveSplit(ctx context.Context, req *Request, lay layout) (Decision, bool, error) {
	type bal struct {
		i     int
		avail int64
		first bool // it can take the request and a concurrency slot
	}
	n := lay.n
	bals := make([]bal, 0, n)
	var total int64
	for i := range n {
		if !lay.usable(req.Limits, i) {
			continue
		}
		l := req.Limits.shard(n, i)
		u, err := r.runUsage(ctx, lay.keys(req.Tenant, i), l, lay.init(i))
		if err != nil {
			return Decision{}, false, err
		}
		avail := u.TokensAvailable
		if l.TPM == 0 {
			avail = MaxRate // no token bucket: only the day's budget bounds it
		}
		if l.DailyTokens > 0 {
			avail = min(avail, max(0, l.DailyTokens-u.DailyTokensUsed))
		}
		bals = append(bals, bal{i: i, avail: avail, first: (l.RPM == 0 || u.RequestsAvailable >= 1) &&
			(l.Concurrency == 0 || u.InFlight < l.Concurrency)})
		total += avail
	}
	if total < req.Tokens || len(bals) == 0 {
		return Decision{}, false, nil
	}
	slices.SortStableFunc(bals, func(a, b bal) int {
		switch {
		case a.first != b.first:
			if a.first {
				return -1
			}
			return 1
		case a.avail != b.avail:
			if a.avail > b.avail {
				return -1
			}
			return 1
		}
		return 0
	})
	if !bals[0].first {
		return Decision{}, false, nil
	}
	var pieces []piece
	var first outcome
	left := req.Tokens
	for k, b := range bals {
		if left == 0 || b.avail == 0 && k > 0 {
			break
		}
		sub := *req
		sub.Tokens = min(left, b.avail)
		l := req.Limits.shard(n, b.i)
		if k == 0 {
			sub.MaxTokens = sub.Tokens + (req.most() - req.Tokens)
		} else {
			sub.MaxTokens = sub.Tokens
			l.RPM, l.Concurrency = 0, 0 // one request, one slot: the first piece's
		}
		sub.Limits = l
		res, err := r.runReserve(ctx, lay.keys(req.Tenant, b.i), &sub, lay.init(b.i), hotArgs{})
		o := res.outcome
		if err == nil && o.code == codeDuplicate {
			err = ErrDuplicateID
		}
		if err != nil || o.code != codeAllowed {
			r.releasePieces(ctx, req.Tenant, req.ID, lay, pieces)
			return Decision{}, false, err
		}
		if k == 0 {
			first = o
		}
		pieces = append(pieces, piece{shard: b.i, tokens: sub.Tokens, over: sub.MaxTokens - sub.Tokens})
		left -= sub.Tokens
	}
	if left > 0 {
		r.releasePieces(ctx, req.Tenant, req.ID, lay, pieces)
		return Decision{}, false, nil
	}
	r.borrowed.Add(1)
	r.book.put(req.Tenant, req.ID, lay, pieces, r.now())
	d := shardDecision(first, req, n)
	d.RemainingTokens = max(0, min(req.Limits.TPM, total-req.Tokens))
	return d, true, nil
}

// releasePieces gives back pieces taken for a split that failed: their
// tokens are refunded (the first piece's request stays counted).
func (r *Redis) releasePieces(ctx context.Context, tenant, id string, lay layout, pieces []piece) {
	for _, p := range pieces {
		r.reconcileKeys(ctx, lay.keys(tenant, p.shard), id, 0)
	}
}

// reconcileBooked settles a sharded reservation piece by piece: the tokens
// used fill the pieces after the first up to their size, and the first
// piece takes the rest (and so any overage, up to its MaxTokens).
func (r *Redis) reconcileBooked(ctx context.Context, tenant, id string, e booked, actual int64) {
	rest := actual
	shares := make([]int64, len(e.pieces))
	for k := len(e.pieces) - 1; k >= 1; k-- {
		shares[k] = min(rest, e.pieces[k].tokens)
		rest -= shares[k]
	}
	shares[0] = rest
	for k, p := range e.pieces {
		r.reconcileKeys(ctx, e.lay.keys(tenant, p.shard), id, shares[k])
	}
}

// usageSharded sums the usage of tenant's lay.n sub-buckets.
func (r *Redis) usageSharded(ctx context.Context, tenant string, l Limits, lay layout) (Usage, error) {
	var sum Usage
	for i := range lay.n {
		if !lay.usable(l, i) {
			continue
		}
		u, err := r.runUsage(ctx, lay.keys(tenant, i), l.shard(lay.n, i), lay.init(i))
		if err != nil {
			return Usage{}, err
		}
		sum.InFlight += u.InFlight
		sum.RequestsAvailable += u.RequestsAvailable
		sum.TokensAvailable += u.TokensAvailable
		sum.TokensOwed += u.TokensOwed
		sum.DailyTokensUsed += u.DailyTokensUsed
	}
	return sum, nil
}

// newRoundRobin starts a node's round robin at a random sub-bucket, so
// that nodes started together do not move in step.
func newRoundRobin() uint64 { return rand.Uint64() }
