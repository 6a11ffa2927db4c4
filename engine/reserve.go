package engine

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Provisioned throughput: a tenant may hold a reservation of output tokens
// per second on an engine (Request.ReservedTPS). While the engine has
// delivered the tenant less than its reservation, its waiting sequences are
// admitted ahead of the weighted-fair order; once it has had its due, or
// has nothing waiting, the fair queue decides as usual, so the capacity it
// does not use goes to the others.
//
// "Less than its reservation" is a credit, in tokens: while the tenant is
// active (it has sequences waiting, prefilling or delivering) the credit
// grows by the reservation every second, and each token delivered takes one
// from it; it is kept within ReservationWindow's worth of the reservation
// either way, and starts again from 0 after the tenant was idle for a
// window. The tenant is served first while its credit is positive and its
// projected rate is below its reservation times reserveHeadroom plus the
// seconds of reservation it is owed (a proportional catch-up). The credit
// pays back any shortfall (a sequence that prefills before it delivers, a
// slow step), so over time the tenant is delivered at least its reservation
// whenever it asks for it and the engine can run it, where a rule on the
// measured rate alone would settle just under it. The windowed rate is what
// is reported (Engine.Reservations).
//
// The projected rate is what the tenant's running sequences deliver now:
// its tokens in the last step, plus one a step for each sequence admitted
// ahead that has not delivered yet (it is prefilling), over the mean step
// time. Without it the windowed rate, which lags, would admit a burst of
// sequences while the first ones prefill, and then leave a gap when they
// all end together.
//
// The measure is the engine's own: a reservation holds per engine (one
// model replica), and the rate counts the tokens delivered, from the
// token events' times, so it needs no clock of its own.

// ReservationWindow is the span over which a tenant's delivered output rate
// is measured against its reservation.
const ReservationWindow = 2 * time.Second

// reserveSlots divides ReservationWindow into slots of tokens counted.
const reserveSlots = 20

// reserveHeadroom is the projected rate, as a fraction of its reservation,
// up to which a tenant with credit is served first: above 1 so that a
// reservation between two multiples of one sequence's rate is reached.
const reserveHeadroom = 1.05

// reserveIdle is how long a tenant with no token and no submission keeps
// its record.
const reserveIdle = time.Minute

// reservations tracks the reserved tenants' delivered output.
//
// Locking: the step goroutine owns every field but snap, which snapMu
// guards (read by Engine.Reservations from other goroutines).
type reservations struct {
	now     time.Time // the latest time seen: a token event or a submission
	tenants map[string]*tenantRate
	// lastStep is the time of the newest step that delivered a token;
	// stepSec the mean seconds between such steps (a moving average, 0
	// before two steps).
	lastStep time.Time
	stepSec  float64

	snapMu sync.Mutex
	snap   []ReservationStat
	snapAt time.Time
}

// tenantRate is one reserved tenant's record.
type tenantRate struct {
	reserved float64 // output tokens per second, from its newest request
	waiting  int     // its sequences waiting in the fair queue
	slots    [reserveSlots]int
	head     int64 // the number of the newest slot (time / slot length)
	total    int   // the sum of slots
	seen     time.Time
	// stepAt is the time of the newest step that delivered the tenant a
	// token, stepTokens how many it delivered.
	stepAt     time.Time
	stepTokens int
	// pending are the requests admitted that have not delivered a token
	// yet, with when they were admitted.
	pending map[string]time.Time
	// credit is the tokens the tenant is owed (see the top of the file), as
	// of creditAt; active is when it was last seen active.
	credit             float64
	creditAt, activeAt time.Time
}

// accrue brings tr's credit to now: the reservation's tokens for the time
// it was active, within a window's worth either way.
func (tr *tenantRate) accrue(now time.Time, active bool) {
	limit := tr.reserved * ReservationWindow.Seconds()
	switch {
	case tr.creditAt.IsZero() || now.Sub(tr.activeAt) > ReservationWindow:
		tr.credit = 0 // new, or idle for a window: no debt, no due
	case now.After(tr.creditAt):
		tr.credit += tr.reserved * now.Sub(tr.creditAt).Seconds()
	}
	tr.credit = min(max(tr.credit, -limit), limit)
	tr.creditAt = now
	if active {
		tr.activeAt = now
	}
}

// ReservationStat is a reserved tenant's state on an engine.
type ReservationStat struct {
	Tenant string
	// ReservedTPS is the reservation, DeliveredTPS the output delivered
	// over the last ReservationWindow, both in tokens per second.
	ReservedTPS, DeliveredTPS float64
	// Waiting counts its sequences waiting for admission.
	Waiting int
}

func newReservations() *reservations {
	return &reservations{tenants: make(map[string]*tenantRate)}
}

const slotLen = ReservationWindow / reserveSlots

func slotOf(t time.Time) int64 { return t.UnixNano() / int64(slotLen) }

// advance moves the clock to t when it is later.
func (rs *reservations) advance(t time.Time) {
	if t.After(rs.now) {
		rs.now = t
	}
}

// roll brings tr's slots to the slot of now, dropping those older than the
// window.
func (tr *tenantRate) roll(now int64) {
	if now <= tr.head {
		return
	}
	if now-tr.head >= reserveSlots {
		tr.slots = [reserveSlots]int{}
		tr.total = 0
	} else {
		for s := tr.head + 1; s <= now; s++ {
			i := s % reserveSlots
			tr.total -= tr.slots[i]
			tr.slots[i] = 0
		}
	}
	tr.head = now
}

// rate is tr's delivered tokens per second over the window ending at now:
// the full slots before now's and the part of now's slot gone by.
func (tr *tenantRate) rate(now time.Time) float64 {
	tr.roll(slotOf(now))
	span := time.Duration(reserveSlots-1)*slotLen + time.Duration(now.UnixNano()%int64(slotLen))
	return float64(tr.total) / span.Seconds()
}

// record returns tenant's record, made when reserved is positive; nil for
// a tenant without a reservation.
func (rs *reservations) record(tenant string, reserved float64) *tenantRate {
	tr := rs.tenants[tenant]
	if tr == nil && reserved > 0 {
		tr = &tenantRate{head: slotOf(rs.now), pending: make(map[string]time.Time)}
		rs.tenants[tenant] = tr
	}
	return tr
}

// queued notes a sequence of r entering (d 1) or leaving (d -1) the fair
// queue. A push carries the request's reservation: the newest one is the
// tenant's.
func (rs *reservations) queued(r *request, d int) {
	if d > 0 {
		rs.advance(r.enqueued)
	}
	tr := rs.record(r.req.Tenant, r.req.ReservedTPS)
	if tr == nil {
		return
	}
	if d > 0 {
		tr.reserved = r.req.ReservedTPS
		tr.seen = rs.now
	}
	tr.waiting = max(0, tr.waiting+d)
}

// admitted notes that a sequence of r left the queue to run.
func (rs *reservations) admitted(r *request) {
	if tr := rs.tenants[r.req.Tenant]; tr != nil {
		tr.pending[r.req.ID] = rs.now
	}
}

// pendingFor is how long an admitted request counts as about to deliver:
// past it (preempted, cancelled, a long prefill) it no longer does.
const pendingFor = time.Second

// delivered counts one output token of req at t.
func (rs *reservations) delivered(req *Request, t time.Time) {
	if t.After(rs.lastStep) {
		if !rs.lastStep.IsZero() {
			d := t.Sub(rs.lastStep).Seconds()
			if rs.stepSec == 0 {
				rs.stepSec = d
			} else {
				rs.stepSec += 0.2 * (d - rs.stepSec)
			}
		}
		rs.lastStep = t
	}
	rs.advance(t)
	if len(rs.tenants) == 0 {
		return
	}
	tr := rs.tenants[req.Tenant]
	if tr == nil {
		return
	}
	s := slotOf(t)
	tr.roll(s)
	if s > tr.head-reserveSlots { // not older than the window
		tr.slots[s%reserveSlots]++
		tr.total++
	}
	if t.Equal(tr.stepAt) {
		tr.stepTokens++
	} else {
		tr.stepAt, tr.stepTokens = t, 1
	}
	tr.accrue(rs.now, true)
	tr.credit--
	delete(tr.pending, req.ID)
	tr.seen = rs.now
	rs.publish()
}

// projected is tr's projected rate in tokens per second (see the top of
// the file); +Inf while the step time is unknown and a request is pending.
func (rs *reservations) projected(tr *tenantRate) float64 {
	n := 0
	if tr.stepAt.Equal(rs.lastStep) {
		n = tr.stepTokens
	}
	for id, at := range tr.pending {
		if rs.now.Sub(at) > pendingFor {
			delete(tr.pending, id)
			continue
		}
		n++
	}
	switch {
	case n == 0:
		return 0
	case rs.stepSec <= 0:
		return math.Inf(1)
	}
	return float64(n) / rs.stepSec
}

// neediest returns the tenant, with sequences waiting, owed the most
// seconds of its reservation, among those with credit whose projected rate
// is below (reserveHeadroom + the seconds owed) times their reservation:
// the more a tenant is owed, the faster it may catch up; "" when none is.
func (rs *reservations) neediest() string {
	best, bestOwed := "", 0.0
	for name, tr := range rs.tenants {
		if tr.reserved <= 0 {
			continue
		}
		tr.accrue(rs.now, tr.waiting > 0 || len(tr.pending) > 0)
		owed := tr.credit / tr.reserved // seconds of the reservation
		if tr.waiting == 0 || owed <= 0 || rs.projected(tr) >= (reserveHeadroom+owed)*tr.reserved {
			continue
		}
		if owed > bestOwed || (owed == bestOwed && name < best) {
			best, bestOwed = name, owed
		}
	}
	return best
}

// publish rebuilds the snapshot at most once per slot, and drops the
// records of tenants idle for reserveIdle.
func (rs *reservations) publish() {
	if rs.now.Sub(rs.snapAt) < slotLen {
		return
	}
	snap := make([]ReservationStat, 0, len(rs.tenants))
	for name, tr := range rs.tenants {
		if tr.waiting == 0 && rs.now.Sub(tr.seen) > reserveIdle {
			delete(rs.tenants, name)
			continue
		}
		snap = append(snap, ReservationStat{Tenant: name, ReservedTPS: tr.reserved, DeliveredTPS: tr.rate(rs.now),
			Waiting: tr.waiting})
	}
	slices.SortFunc(snap, func(a, b ReservationStat) int {
		switch {
		case a.Tenant < b.Tenant:
			return -1
		case a.Tenant > b.Tenant:
			return 1
		}
		return 0
	})
	rs.snapMu.Lock()
	rs.snap, rs.snapAt = snap, rs.now
	rs.snapMu.Unlock()
}

// snapshot returns the last published reservation states; the caller owns
// the slice.
func (rs *reservations) snapshot() []ReservationStat {
	rs.snapMu.Lock()
	defer rs.snapMu.Unlock()
	return slices.Clone(rs.snap)
}

// reservedHead returns the first sequence, by arrival, of tenant in the
// classes peek may offer (not paused, not shadow); nil when none.
func (q *fairQueue) reservedHead(tenant string) *sequence {
	var best *sequence
	for p := NumPriorities - 1; p > int(PriorityShadow); p-- {
		if q.paused[p] {
			continue
		}
		if t := q.classes[p].tenants[tenant]; t != nil && len(t.seqs) > 0 &&
			(best == nil || seqBefore(t.seqs[0], best)) {
			best = t.seqs[0]
		}
	}
	return best
}

// trackDelivery wraps emit so that the token events of reserved tenants
// count toward their delivered rate.
func (rs *reservations) trackDelivery(emit Emit) Emit {
	return func(r *Request, ev Event) {
		switch ev.Kind {
		case EventToken:
			rs.delivered(r, ev.Time)
		case EventFinish:
			// One that ends before its first token (a stop sampled first,
			// a cancel) delivers nothing more.
			if tr := rs.tenants[r.Tenant]; tr != nil {
				delete(tr.pending, r.ID)
			}
		}
		emit(r, ev)
	}
}

// Reservations returns the reserved tenants' delivered output rates
// against their reservations, as of the engine's last published snapshot
// (at most ReservationWindow/20 old while tokens flow), ordered by tenant.
// The caller owns the slice. Safe for concurrent use.
func (e *Engine) Reservations() []ReservationStat { return e.sched.waiting.resv.snapshot() }
