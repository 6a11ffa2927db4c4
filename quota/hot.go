package quota

import (
	"fmt"
	"math/big"
	"strconv"
	"sync"
	"time"
)

// Hot tenants detected by their request rate. With RedisConfig.HotRPS set,
// the reserve script on a tenant's whole bucket also counts the requests
// that reach it in each second of Redis's clock; the one that makes more
// than HotRPS splits the tenant in the same atomic call: it writes a split
// record into the tenant's state hash and from then on that bucket admits
// nothing. The record (split) carries the time of the split, n and the
// balance moved out; every node that reaches the whole bucket gets the
// record in the reply (code 7) and follows it, whatever its own settings,
// so that the nodes never disagree on the split. The sub-buckets of a
// detected split have keys of their own per split (hotKeys), and each
// starts with its part of the moved balance (split.part), set only if it
// does not exist yet; the parts add up to the balance exactly. See "Hot
// tenants" in the package doc for the bound.

// codeSplit is the reserve script's code for "the tenant is split: this
// bucket admits nothing, use the sub-buckets of the record that follows".
const codeSplit = 7

// hotRecheck is how long a node trusts a split record it read before it
// reads it again from the tenant's bucket (which also keeps the record
// alive in Redis): a tenant's whole bucket is touched at most once per
// hotRecheck per node while it is split. hotMax bounds the records kept.
const (
	hotRecheck = 10 * time.Second
	hotMax     = 10_000
)

// split is a tenant's split record as the reserve script wrote it, with
// the parts computed from it.
type split struct {
	at              int64 // ms, Redis's clock: the split's epoch
	n               int
	rpm, tpm, daily int64 // the limits when split
	rb, tb          int64 // the units moved out (0 for a limit of 0)
	day, used       int64 // the UTC day and its used tokens, held overage included
	parts           []hotPart
}

// hotPart is a detected sub-bucket's starting state.
type hotPart struct {
	rb, tb    string // units, "" when the limit was 0 (unset: full)
	day, used int64
}

// hotKeys are the keys of part i of tenant's split at epoch at. Each part
// has its own hash tag, so that in a Redis Cluster the parts spread over
// slots; the prefix (llmd:qd:) is used by nothing else, and the last two
// fields of the tag are numbers, so no two tenants' tags meet.
func hotKeys(tenant string, at int64, i int) []string {
	p := "llmd:qd:{" + tenant + "/" + strconv.FormatInt(at, 10) + "/" + strconv.Itoa(i) + "}:"
	return []string{p + "s", p + "r", p + "e"}
}

// parseSplit reads a split record's nine fields.
func parseSplit(f []int64) (*split, error) {
	if len(f) != 9 || f[0] <= 0 || f[1] < 2 || f[1] > MaxShards ||
		f[2] < 0 || f[2] > MaxRate || f[3] < 0 || f[3] > MaxRate || f[4] < 0 || f[4] > MaxDailyTokens {
		return nil, fmt.Errorf("quota: bad split record %v", f)
	}
	s := &split{at: f[0], n: int(f[1]), rpm: f[2], tpm: f[3], daily: f[4], rb: f[5], tb: f[6], day: f[7], used: f[8]}
	s.parts = make([]hotPart, s.n)
	weights := func(limit int64) []int64 {
		w := make([]int64, s.n)
		for i := range w {
			w[i] = share(limit, s.n, i)
			if limit == 0 {
				w[i] = 1
			}
		}
		return w
	}
	if s.rpm > 0 {
		for i, v := range divide(s.rb, weights(s.rpm)) {
			s.parts[i].rb = strconv.FormatInt(v, 10)
		}
	}
	if s.tpm > 0 {
		for i, v := range divide(s.tb, weights(s.tpm)) {
			s.parts[i].tb = strconv.FormatInt(v, 10)
		}
	}
	// The day's budget left is divided like a balance: part i has used
	// its share of the limit less its part of what is left.
	w := weights(s.daily)
	var used []int64
	if s.daily > 0 {
		used = divide(s.daily-s.used, w)
		for i := range used {
			used[i] = w[i] - used[i]
		}
	} else {
		used = divide(s.used, w)
	}
	for i := range s.parts {
		s.parts[i].day, s.parts[i].used = s.day, used[i]
	}
	return s, nil
}

// divide splits v (any sign) in proportion to the weights: part i is
// floor(v*w[i]/W), W the weights' sum, plus one for as many of the parts
// whose share is not whole as the floors leave short, so the parts add up
// to v exactly. A part is rounded up only when its exact share is below a
// whole number, so when v is at most the capacity W*u of a bucket whose
// part i holds w[i]*u, no part exceeds its own capacity (a full bucket
// divides into full parts).
func divide(v int64, w []int64) []int64 {
	var total int64
	for _, x := range w {
		total += x
	}
	out := make([]int64, len(w))
	if total == 0 {
		return out
	}
	bv, bt := big.NewInt(v), big.NewInt(total)
	var sum int64
	frac := make([]bool, len(w))
	for i, x := range w {
		q, m := new(big.Int).DivMod(new(big.Int).Mul(bv, big.NewInt(x)), bt, new(big.Int))
		out[i] = q.Int64() // |q| <= |v|: it fits
		frac[i] = m.Sign() != 0
		sum += out[i]
	}
	// 0 <= v - sum < the parts with a remainder (each floor lost under 1).
	for i := 0; sum < v && i < len(out); i++ {
		if frac[i] {
			out[i]++
			sum++
		}
	}
	return out
}

// usable reports whether part i of the split can take a request under l:
// a limit set now whose share for i is 0 (the limit was lowered below n
// after the split) would read as unlimited, so such a part is skipped.
func usable(l Limits, n, i int) bool {
	for _, v := range [...]int64{l.RPM, l.TPM, l.Concurrency, l.DailyTokens} {
		if v > 0 && share(v, n, i) == 0 {
			return false
		}
	}
	return true
}

// hotCache is the split records a node has read, by tenant.
//
// Locking: mu guards every field.
type hotCache struct {
	mu        sync.Mutex
	m         map[string]hotEntry
	nextSweep time.Time
}

type hotEntry struct {
	s    *split
	read time.Time
}

func newHotCache() *hotCache { return &hotCache{m: make(map[string]hotEntry)} }

// get returns tenant's split read less than hotRecheck before now, or nil.
func (c *hotCache) get(tenant string, now time.Time) *split {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[tenant]
	if !ok || now.Sub(e.read) >= hotRecheck || now.Before(e.read) {
		return nil
	}
	return e.s
}

// put remembers tenant's split, read at now. It keeps the parts already
// computed when the record is the same.
func (c *hotCache) put(tenant string, s *split, now time.Time) *split {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.After(c.nextSweep) || len(c.m) >= hotMax {
		for k, e := range c.m {
			if now.Sub(e.read) >= hotRecheck {
				delete(c.m, k)
			}
		}
		c.nextSweep = now.Add(hotRecheck)
	}
	if e, ok := c.m[tenant]; ok && e.s.at == s.at {
		s = e.s
	}
	if len(c.m) < hotMax {
		c.m[tenant] = hotEntry{s: s, read: now}
	}
	return s
}

// drop forgets tenant's split (its bucket answered unsplit).
func (c *hotCache) drop(tenant string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, tenant)
}
