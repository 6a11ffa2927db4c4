package cluster

import (
	"encoding/binary"
	"math"
)

// Kinds of the control messages (the first byte; see the package doc).
const (
	// kindPushPullV2 is the push/pull state with control records: the
	// kindPushPull state, then a page of control records.
	kindPushPullV2 byte = 4
	// kindControl is a gossip message of one control record.
	kindControl byte = 5
)

// Control wire limits.
const (
	// maxControlKindBytes and maxControlIDBytes bound a record's kind and
	// id.
	maxControlKindBytes = 16
	maxControlIDBytes   = 128
	// maxControlPayloadBytes bounds a record's payload.
	maxControlPayloadBytes = 16 << 10
	// maxControlPageBytes bounds the control records of one push/pull
	// state; a larger set is sent in pages, one per push/pull (see
	// controlState.page).
	maxControlPageBytes = 1 << 20
	// maxControlRecords bounds the records of one push/pull state.
	maxControlRecords = 1 << 16
	// flagDeleted marks a tombstone.
	flagDeleted byte = 1
)

// appendControlRecord encodes r: kind, id, wall, logical, node, a flags
// byte, the payload.
func appendControlRecord(b []byte, r *ControlRecord) []byte {
	e := encoder{b}
	e.str(r.Kind)
	e.str(r.ID)
	e.uvarint(uint64(max(r.Version.Wall, 0)))
	e.uvarint(uint64(r.Version.Logical))
	e.str(r.Version.Node)
	var flags byte
	if r.Deleted {
		flags |= flagDeleted
	}
	e.byte(flags)
	e.uvarint(uint64(len(r.Payload)))
	e.b = append(e.b, r.Payload...)
	return e.b
}

func (d *decoder) controlRecord() ControlRecord {
	var r ControlRecord
	r.Kind = d.str(maxControlKindBytes)
	r.ID = d.str(maxControlIDBytes)
	wall, logical := d.uvarint(), d.uvarint()
	if wall > math.MaxInt64 || logical > math.MaxUint32 {
		d.fail()
	}
	r.Version = ControlVersion{Wall: int64(wall), Logical: uint32(logical), Node: d.str(maxNodeIDBytes)}
	flags := d.byte()
	if flags&^flagDeleted != 0 {
		d.fail()
	}
	r.Deleted = flags&flagDeleted != 0
	n := d.count(maxControlPayloadBytes, 1)
	if d.err != nil {
		return ControlRecord{}
	}
	r.Payload = append([]byte(nil), d.b[:n]...)
	d.b = d.b[n:]
	if r.Kind == "" || r.ID == "" || r.Version.Node == "" {
		d.fail()
	}
	return r
}

// encodeControlMsg encodes r as a gossip message, or returns nil when it
// would be larger than MaxBroadcastBytes (it then travels in push/pull
// only).
func encodeControlMsg(r *ControlRecord) []byte {
	b := appendControlRecord([]byte{kindControl}, r)
	if len(b) > MaxBroadcastBytes {
		return nil
	}
	return b
}

// decodeControlMsg decodes a gossip message of one control record.
func decodeControlMsg(b []byte) (ControlRecord, error) {
	if len(b) > MaxBroadcastBytes {
		return ControlRecord{}, errMalformed
	}
	d := decoder{b: b}
	if d.byte() != kindControl {
		return ControlRecord{}, errMalformed
	}
	r := d.controlRecord()
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	return r, d.err
}

// encodePushPullV2 wraps a kindPushPull state and a page of encoded
// control records (each a length and its bytes, count of them).
func encodePushPullV2(state []byte, count int, page []byte) []byte {
	e := encoder{make([]byte, 0, len(state)+len(page)+16)}
	e.byte(kindPushPullV2)
	e.uvarint(uint64(len(state)))
	e.b = append(e.b, state...)
	e.uvarint(uint64(count))
	e.b = append(e.b, page...)
	return e.b
}

// decodePushPullV2 splits a push/pull state in its kindPushPull part and
// its control records. A kindPushPull state (a node without control
// records) has none.
func decodePushPullV2(b []byte) (state []byte, recs []ControlRecord, err error) {
	if len(b) > 0 && b[0] == kindPushPull {
		return b, nil, nil
	}
	d := decoder{b: b}
	if d.byte() != kindPushPullV2 {
		return nil, nil, errMalformed
	}
	n := d.count(len(d.b), 1)
	if d.err != nil {
		return nil, nil, d.err
	}
	state, d.b = d.b[:n], d.b[n:]
	// A record takes at least 8 bytes after its length.
	count := d.count(maxControlRecords, 9)
	if d.err != nil {
		return nil, nil, d.err
	}
	recs = make([]ControlRecord, 0, count)
	for range count {
		size := d.count(len(d.b), 1)
		if d.err != nil {
			return nil, nil, d.err
		}
		rd := decoder{b: d.b[:size]}
		r := rd.controlRecord()
		if rd.err == nil && len(rd.b) != 0 {
			rd.fail()
		}
		if rd.err != nil {
			return nil, nil, rd.err
		}
		d.b = d.b[size:]
		recs = append(recs, r)
	}
	if len(d.b) != 0 {
		return nil, nil, errMalformed
	}
	return state, recs, nil
}

// appendSized appends a record's encoding preceded by its length.
func appendSized(b []byte, rec []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(rec)))
	return append(b, rec...)
}
