package store

import (
	"fmt"
	"math"
	"strings"
)

// Capacity is a tenant's settings beside its limits: how its quota buckets
// are split, the limits of each of its end users, and the output rate the
// engine keeps for it. Tiers have no defaults for them: the zero Capacity
// sets nothing.
type Capacity struct {
	// HotShards splits each of the tenant's Redis buckets into that many
	// sub-buckets, so that no one key takes all of a hot tenant's traffic
	// (0 or 1: one bucket; see package quota). At most MaxHotShards.
	HotShards int64
	// UserRPM and UserTPM limit each end user of the tenant (the OpenAI
	// "user" field, Anthropic's metadata.user_id or the X-LLMD-User
	// header): requests and tokens per minute; 0 sets no per-user limit.
	UserRPM, UserTPM int64
	// ReservedTPS is the output tokens per second the engine's scheduler
	// keeps for the tenant on ReservedModel ("" on every model it serves);
	// 0 reserves nothing.
	ReservedTPS   float64
	ReservedModel string
}

// MaxHotShards bounds Capacity.HotShards.
const MaxHotShards = 64

// maxReservedModel bounds the length of Capacity.ReservedModel.
const maxReservedModel = 256

// check returns an error wrapping ErrInvalid for a value out of range.
func (c Capacity) check() error {
	switch {
	case c.HotShards < 0 || c.HotShards > MaxHotShards:
		return fmt.Errorf("%w: hot_shards %d: want 0 to %d", ErrInvalid, c.HotShards, MaxHotShards)
	case c.UserRPM < 0 || c.UserTPM < 0:
		return fmt.Errorf("%w: per-user limits must not be negative", ErrInvalid)
	case c.ReservedTPS < 0 || math.IsNaN(c.ReservedTPS) || math.IsInf(c.ReservedTPS, 0):
		return fmt.Errorf("%w: reserved_tps %v: want 0 or a positive number", ErrInvalid, c.ReservedTPS)
	case len(c.ReservedModel) > maxReservedModel || strings.ContainsFunc(c.ReservedModel, func(r rune) bool { return r < 0x20 }):
		return fmt.Errorf("%w: reserved_model %q: want at most %d printable characters", ErrInvalid, c.ReservedModel, maxReservedModel)
	}
	return nil
}

// ReservedFor is the output tokens per second reserved for the tenant on
// model: ReservedTPS when ReservedModel is "" or model, else 0.
func (c Capacity) ReservedFor(model string) float64 {
	if c.ReservedModel == "" || c.ReservedModel == model {
		return c.ReservedTPS
	}
	return 0
}

// CapacityUpdate changes a tenant's Capacity: a nil field keeps its value,
// 0 (or "") clears it.
type CapacityUpdate struct {
	HotShards, UserRPM, UserTPM *int64
	ReservedTPS                 *float64
	ReservedModel               *string
}

// apply returns c changed by u.
func (u CapacityUpdate) apply(c Capacity) Capacity {
	if u.HotShards != nil {
		c.HotShards = *u.HotShards
	}
	if u.UserRPM != nil {
		c.UserRPM = *u.UserRPM
	}
	if u.UserTPM != nil {
		c.UserTPM = *u.UserTPM
	}
	if u.ReservedTPS != nil {
		c.ReservedTPS = *u.ReservedTPS
	}
	if u.ReservedModel != nil {
		c.ReservedModel = *u.ReservedModel
	}
	return c
}
