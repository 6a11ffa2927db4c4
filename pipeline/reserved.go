package pipeline

import "github.com/llmd/llmd/engine"

// ReservationReporter is a Replica that reports its reserved tenants'
// delivered output rates (provisioned throughput); *engine.Engine's
// adapter does.
type ReservationReporter interface {
	Reservations() []engine.ReservationStat
}

// Reservations implements ReservationReporter.
func (r EngineReplica) Reservations() []engine.ReservationStat { return r.E.Reservations() }

// ReservationsOf is m's reserved tenants' rates, nil when its replica does
// not report them (an upstream engine, a peer-only model).
func ReservationsOf(m *Model) []engine.ReservationStat {
	if rr, ok := m.Replica.(ReservationReporter); ok {
		return rr.Reservations()
	}
	return nil
}
