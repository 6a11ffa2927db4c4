package cluster

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sort"

	"github.com/llmd/llmd/engine/kvcache"
)

// Wire limits. Every count read from the network is checked against these
// and against the bytes left before anything is allocated.
const (
	// MaxPrefixKeys caps the prefix keys per model in a summary record
	// (push/pull): 8 KiB per model.
	MaxPrefixKeys = 1024
	// BroadcastPrefixKeys caps the prefix keys in a gossiped state record,
	// across all models (256 bytes): the first keys of each model's list,
	// taken in turn.
	BroadcastPrefixKeys = 32
	// MaxBroadcastBytes caps an encoded gossip message, well under
	// memberlist's 1400-byte UDP packet less its headers and encryption.
	MaxBroadcastBytes = 1024
	// maxModels caps the models in one record.
	maxModels = 64
	// maxRecords caps the records in one push/pull state.
	maxRecords = 4096
	// maxPushPullBytes caps the push/pull state this node sends; records
	// past it are left out (the next push/pull or gossip brings them).
	maxPushPullBytes = 4 << 20
	// maxCount bounds running and waiting counts.
	maxCount = 1 << 31
)

// Message and record kinds (the first byte).
const (
	kindState    byte = 1
	kindSummary  byte = 2
	kindPushPull byte = 3
)

// Flags of a state record.
const (
	flagDraining byte = 1 << 0
	flagLeaving  byte = 1 << 1
	knownFlags        = flagDraining | flagLeaving
)

// errMalformed is returned for any undecodable input.
var errMalformed = errors.New("cluster: malformed message")

// version orders the states one node publishes: epoch is its start time in
// nanoseconds (or later, see Cluster.refute), seq counts publications.
type version struct{ Epoch, Seq uint64 }

func (v version) newer(o version) bool {
	return v.Epoch > o.Epoch || (v.Epoch == o.Epoch && v.Seq > o.Seq)
}

func (v version) IsZero() bool { return v == version{} }

// prefixKey truncates a block hash to the 64 bits that travel.
func prefixKey(h kvcache.Hash) uint64 { return h.Hi }

// modelRecord is one model's part of a record. Load is unset in a summary.
type modelRecord struct {
	Name string
	Load ModelLoad
	Keys []uint64
	// more holds the load counters past those this version knows (a newer
	// node's), kept so that a record re-encodes to its bytes.
	more []uint64
}

// Load counters of a state record: the waiting sequences of each tier,
// then these, by position. A newer version appends counters; an older one
// reads them all and keeps those it knows. The list never ends with a zero
// past the tiers (zeros at the end are left out), so each load has one
// encoding.
const (
	counterQueuedPromptTokens = NumTiers + iota
	counterPrefillRate
	counterBlockTokens
	knownCounters
)

// maxCounters caps the load counters of one model.
const maxCounters = 64

// loadCounters returns l's counters, then more, without trailing zeros
// past the tiers.
func loadCounters(l ModelLoad, more []uint64) []uint64 {
	c := make([]uint64, knownCounters, knownCounters+len(more))
	for i, w := range l.WaitingByTier {
		c[i] = uint64(clampCount(w))
	}
	c[counterQueuedPromptTokens] = uint64(clampCount(l.QueuedPromptTokens))
	c[counterPrefillRate] = uint64(clampCount(int(math.Round(min(finiteNonNeg(l.PrefillTokensPerSecond), maxCount-1)))))
	c[counterBlockTokens] = uint64(clampCount(l.BlockTokens))
	c = append(c, more...)
	for len(c) > NumTiers && c[len(c)-1] == 0 {
		c = c[:len(c)-1]
	}
	return c
}

// record is a decoded state or summary record.
type record struct {
	Kind    byte
	Node    string
	Version version
	Flags   byte // state only
	Models  []modelRecord
}

// encoder appends to a byte slice.
type encoder struct{ b []byte }

func (e *encoder) byte(v byte)      { e.b = append(e.b, v) }
func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) str(s string) {
	e.uvarint(uint64(len(s)))
	e.b = append(e.b, s...)
}
func (e *encoder) f32(v float64) {
	e.b = binary.LittleEndian.AppendUint32(e.b, math.Float32bits(float32(v)))
}
func (e *encoder) keys(ks []uint64) {
	e.uvarint(uint64(len(ks)))
	for _, k := range ks {
		e.b = binary.LittleEndian.AppendUint64(e.b, k)
	}
}

// appendRecord encodes r. Models are written in the order given.
func appendRecord(b []byte, r *record) []byte {
	e := encoder{b}
	e.byte(r.Kind)
	e.str(r.Node)
	e.uvarint(r.Version.Epoch)
	e.uvarint(r.Version.Seq)
	if r.Kind == kindState {
		e.byte(r.Flags)
	}
	e.uvarint(uint64(len(r.Models)))
	for _, m := range r.Models {
		e.str(m.Name)
		if r.Kind == kindState {
			e.uvarint(uint64(clampCount(m.Load.Running)))
			e.uvarint(uint64(clampCount(m.Load.Waiting)))
			e.f32(m.Load.KVUsage)
			e.f32(m.Load.TokensPerSecond)
			counters := loadCounters(m.Load, m.more)
			e.uvarint(uint64(len(counters)))
			for _, c := range counters {
				e.uvarint(c)
			}
		}
		e.keys(m.Keys)
	}
	return e.b
}

func clampCount(n int) int {
	return min(max(n, 0), maxCount-1)
}

// encodePushPull encodes records as a push/pull state, leaving out records
// past maxPushPullBytes.
func encodePushPull(recs []*record) []byte {
	e := encoder{make([]byte, 0, 256)}
	e.byte(kindPushPull)
	var body []byte
	n := 0
	var scratch []byte
	for _, r := range recs {
		if n == maxRecords {
			break
		}
		scratch = appendRecord(scratch[:0], r)
		if len(body)+len(scratch)+binary.MaxVarintLen64 > maxPushPullBytes {
			break
		}
		body = binary.AppendUvarint(body, uint64(len(scratch)))
		body = append(body, scratch...)
		n++
	}
	e.uvarint(uint64(n))
	return append(e.b, body...)
}

// decoder reads from a byte slice; the first error sticks and every later
// read returns zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() { d.err = errMalformed; d.b = nil }

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) < 1 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	// Only the shortest encoding is accepted, so each value has one form.
	if n <= 0 || (n > 1 && d.b[n-1] == 0) {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a count that must be at most limit and, at unit bytes per
// item, fit in what is left.
func (d *decoder) count(limit, unit int) int {
	v := d.uvarint()
	if d.err != nil || v > uint64(limit) || v*uint64(unit) > uint64(len(d.b)) {
		d.fail()
		return 0
	}
	return int(v)
}

func (d *decoder) str(maxBytes int) string {
	n := d.count(maxBytes, 1)
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) f32() float64 {
	if d.err != nil || len(d.b) < 4 {
		d.fail()
		return 0
	}
	v := math.Float32frombits(binary.LittleEndian.Uint32(d.b))
	d.b = d.b[4:]
	f := float64(v)
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		d.fail()
		return 0
	}
	return f
}

func (d *decoder) keys() []uint64 {
	n := d.count(MaxPrefixKeys, 8)
	if d.err != nil || n == 0 {
		return nil
	}
	ks := make([]uint64, n)
	for i := range ks {
		ks[i] = binary.LittleEndian.Uint64(d.b[8*i:])
	}
	d.b = d.b[8*n:]
	return ks
}

// decodeRecord decodes exactly one record from b. The result shares no
// memory with b.
func decodeRecord(b []byte) (*record, error) {
	d := decoder{b: b}
	r := d.record()
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	if d.err != nil {
		return nil, d.err
	}
	return r, nil
}

func (d *decoder) record() *record {
	r := &record{Kind: d.byte()}
	if d.err == nil && r.Kind != kindState && r.Kind != kindSummary {
		d.fail()
	}
	r.Node = d.str(maxNodeIDBytes)
	if d.err == nil && r.Node == "" {
		d.fail()
	}
	r.Version = version{Epoch: d.uvarint(), Seq: d.uvarint()}
	if r.Kind == kindState {
		r.Flags = d.byte()
		if r.Flags&^knownFlags != 0 {
			d.fail()
		}
	}
	// A model takes at least 2 bytes: a name length and a key count.
	n := d.count(maxModels, 2)
	if d.err != nil {
		return nil
	}
	r.Models = make([]modelRecord, 0, n)
	for range n {
		m := modelRecord{Name: d.str(maxModelNameBytes)}
		if d.err == nil && m.Name == "" {
			d.fail()
		}
		if r.Kind == kindState {
			running, waiting := d.uvarint(), d.uvarint()
			if running >= maxCount || waiting >= maxCount {
				d.fail()
			}
			m.Load = ModelLoad{Running: int(running), Waiting: int(waiting), KVUsage: d.f32(), TokensPerSecond: d.f32()}
			// Counters past those known (a newer node's) are kept aside.
			n := d.count(maxCounters, 1)
			if d.err == nil && n < NumTiers {
				d.fail()
			}
			last := uint64(0)
			for i := range n {
				last = d.uvarint()
				if last >= maxCount {
					d.fail()
				}
				w := int(last)
				switch {
				case i < NumTiers:
					m.Load.WaitingByTier[i] = w
				case i == counterQueuedPromptTokens:
					m.Load.QueuedPromptTokens = w
				case i == counterPrefillRate:
					m.Load.PrefillTokensPerSecond = float64(w)
				case i == counterBlockTokens:
					m.Load.BlockTokens = w
				default:
					m.more = append(m.more, last)
				}
			}
			if n > NumTiers && last == 0 {
				d.fail() // a trailing zero: not the one encoding
			}
		}
		m.Keys = d.keys()
		if d.err != nil {
			return nil
		}
		r.Models = append(r.Models, m)
	}
	// Duplicate model names would make the meaning ambiguous.
	names := make([]string, len(r.Models))
	for i, m := range r.Models {
		names[i] = m.Name
	}
	sort.Strings(names)
	if len(slices.Compact(names)) != len(r.Models) {
		d.fail()
		return nil
	}
	return r
}

// decodeGossip decodes a gossip message: one state record of at most
// MaxBroadcastBytes.
func decodeGossip(b []byte) (*record, error) {
	if len(b) > MaxBroadcastBytes {
		return nil, errMalformed
	}
	r, err := decodeRecord(b)
	if err != nil {
		return nil, err
	}
	if r.Kind != kindState {
		return nil, errMalformed
	}
	return r, nil
}

// decodePushPull decodes a push/pull state into its records.
func decodePushPull(b []byte) ([]*record, error) {
	d := decoder{b: b}
	if d.byte() != kindPushPull {
		return nil, errMalformed
	}
	// A record takes at least 6 bytes after its length.
	n := d.count(maxRecords, 7)
	if d.err != nil {
		return nil, d.err
	}
	recs := make([]*record, 0, n)
	for range n {
		size := d.count(len(d.b), 1)
		if d.err != nil {
			return nil, d.err
		}
		r, err := decodeRecord(d.b[:size])
		if err != nil {
			return nil, err
		}
		d.b = d.b[size:]
		recs = append(recs, r)
	}
	if len(d.b) != 0 {
		return nil, errMalformed
	}
	return recs, nil
}

// peekHeader reads the kind, node and version of an encoded record without
// decoding the rest, so a stale gossip message costs little.
func peekHeader(b []byte) (kind byte, node string, v version, ok bool) {
	d := decoder{b: b}
	kind = d.byte()
	n := d.count(maxNodeIDBytes, 1)
	if d.err != nil {
		return 0, "", version{}, false
	}
	nodeBytes := d.b[:n]
	d.b = d.b[n:]
	v = version{Epoch: d.uvarint(), Seq: d.uvarint()}
	if d.err != nil {
		return 0, "", version{}, false
	}
	return kind, string(nodeBytes), v, true
}

// stateRecords builds the state record (with at most capKeys prefix keys in
// all, when capKeys >= 0) and the summary record (at most MaxPrefixKeys
// per model) of a published State. Models are sorted by name.
func stateRecords(node string, v version, st State, capKeys int) (state, summary *record) {
	names := make([]string, 0, len(st.Load)+len(st.Prefixes))
	for name := range st.Load {
		names = append(names, name)
	}
	for name := range st.Prefixes {
		if _, ok := st.Load[name]; !ok {
			names = append(names, name)
		}
	}
	names = slices.DeleteFunc(names, func(n string) bool { return validName("model", n, maxModelNameBytes) != nil })
	sort.Strings(names)
	if len(names) > maxModels {
		names = names[:maxModels]
	}
	state = &record{Kind: kindState, Node: node, Version: v}
	if st.Draining {
		state.Flags |= flagDraining
	}
	summary = &record{Kind: kindSummary, Node: node, Version: v}
	for _, name := range names {
		hashes := st.Prefixes[name]
		keys := make([]uint64, 0, min(len(hashes), MaxPrefixKeys))
		for _, h := range hashes {
			if len(keys) == MaxPrefixKeys {
				break
			}
			keys = append(keys, prefixKey(h))
		}
		state.Models = append(state.Models, modelRecord{Name: name, Load: sanitizeLoad(st.Load[name])})
		summary.Models = append(summary.Models, modelRecord{Name: name, Keys: keys})
	}
	// Deal the broadcast keys out one per model in turn, front first.
	for depth, taken := 0, 0; taken < capKeys; depth++ {
		progressed := false
		for i := range summary.Models {
			if taken == capKeys {
				break
			}
			if ks := summary.Models[i].Keys; depth < len(ks) {
				state.Models[i].Keys = append(state.Models[i].Keys, ks[depth])
				taken++
				progressed = true
			}
		}
		if !progressed {
			break
		}
	}
	return state, summary
}

func sanitizeLoad(l ModelLoad) ModelLoad {
	l.Running = clampCount(l.Running)
	l.Waiting = clampCount(l.Waiting)
	l.KVUsage = finiteNonNeg(l.KVUsage)
	l.TokensPerSecond = finiteNonNeg(l.TokensPerSecond)
	l.QueuedPromptTokens = clampCount(l.QueuedPromptTokens)
	l.PrefillTokensPerSecond = math.Round(min(finiteNonNeg(l.PrefillTokensPerSecond), maxCount-1))
	l.BlockTokens = clampCount(l.BlockTokens)
	for i := range l.WaitingByTier {
		l.WaitingByTier[i] = clampCount(l.WaitingByTier[i])
	}
	return l
}

func finiteNonNeg(f float64) float64 {
	if math.IsNaN(f) || f < 0 {
		return 0
	}
	return min(f, math.MaxFloat32)
}

// encodeGossip encodes a state record as a gossip message of at most
// MaxBroadcastBytes, dropping prefix keys from the back and then models
// when it would be larger.
func encodeGossip(r *record) []byte {
	b := appendRecord(nil, r)
	if len(b) <= MaxBroadcastBytes {
		return b
	}
	cp := *r
	cp.Models = slices.Clone(r.Models)
	for len(b) > MaxBroadcastBytes {
		trimmed := false
		for i := len(cp.Models) - 1; i >= 0; i-- {
			if k := cp.Models[i].Keys; len(k) > 0 {
				cp.Models[i].Keys = k[:len(k)-1]
				trimmed = true
				break
			}
		}
		if !trimmed {
			cp.Models = cp.Models[:len(cp.Models)-1]
		}
		b = appendRecord(b[:0], &cp)
	}
	return b
}
