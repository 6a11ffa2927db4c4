package cluster

import (
	"fmt"

	"github.com/hashicorp/memberlist"
)

// The first byte of the node metadata: metaFormat, metaFormatZone when a
// zone follows the models, or metaFormatRole when a zone (possibly empty)
// and a role byte follow them. A node writes the oldest format that holds
// what it says (one with neither zone nor role writes the first, which
// nodes of every earlier version read).
const (
	metaFormat     byte = 1
	metaFormatZone byte = 2
	metaFormatRole byte = 3
)

// Role is the part a node takes in disaggregated prefill and decode.
type Role string

// Roles. RoleBoth (the default, "") runs requests whole; a RolePrefill node
// gets no requests from the router (other than as the last resort) and
// prefills prompts for decode nodes, which pull the KV blocks from it; a
// RoleDecode node runs requests and may pull their prompts' KV from a
// prefill node.
const (
	RoleBoth    Role = ""
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
)

// ParseRole reads "prefill", "decode" or "both" ("" is both).
func ParseRole(s string) (Role, error) {
	switch s {
	case "", "both":
		return RoleBoth, nil
	case "prefill":
		return RolePrefill, nil
	case "decode":
		return RoleDecode, nil
	}
	return "", fmt.Errorf("cluster: role %q is not prefill, decode or both", s)
}

// String is "prefill", "decode" or "both".
func (r Role) String() string {
	if r == RoleBoth {
		return "both"
	}
	return string(r)
}

// roleBytes are the roles on the wire (metaFormatRole).
var roleBytes = map[Role]byte{RoleBoth: 0, RolePrefill: 1, RoleDecode: 2}

// nodeMeta is what a node says about itself in memberlist's NodeMeta.
type nodeMeta struct {
	ID, APIAddr, Version string
	Models               []string
	Zone                 string
	Role                 Role
}

func (m *nodeMeta) encode() []byte {
	e := encoder{make([]byte, 0, 64)}
	switch {
	case m.Role != RoleBoth:
		e.byte(metaFormatRole)
	case m.Zone != "":
		e.byte(metaFormatZone)
	default:
		e.byte(metaFormat)
	}
	e.str(m.ID)
	e.str(m.APIAddr)
	e.str(m.Version)
	e.uvarint(uint64(len(m.Models)))
	for _, s := range m.Models {
		e.str(s)
	}
	if m.Zone != "" || m.Role != RoleBoth {
		e.str(m.Zone)
	}
	if m.Role != RoleBoth {
		e.byte(roleBytes[m.Role])
	}
	return e.b
}

// decodeMeta decodes the metadata of memberlist node name, rejecting
// anything malformed, an unknown format, or an id that is not the node's
// memberlist name (one function, like consul's IsConsulServer).
func decodeMeta(name string, b []byte) (*nodeMeta, error) {
	if len(b) > memberlist.MetaMaxSize {
		return nil, errMalformed
	}
	d := decoder{b: b}
	format := d.byte()
	if format != metaFormat && format != metaFormatZone && format != metaFormatRole {
		return nil, errMalformed
	}
	m := &nodeMeta{
		ID:      d.str(maxNodeIDBytes),
		APIAddr: d.str(memberlist.MetaMaxSize),
		Version: d.str(memberlist.MetaMaxSize),
	}
	n := d.count(maxModels, 2)
	for range n {
		s := d.str(maxModelNameBytes)
		if s == "" {
			d.fail()
		}
		m.Models = append(m.Models, s)
	}
	switch format {
	case metaFormatZone:
		if m.Zone = d.str(maxNodeIDBytes); m.Zone == "" {
			d.fail()
		}
	case metaFormatRole:
		m.Zone = d.str(maxNodeIDBytes)
		switch d.byte() {
		case 1:
			m.Role = RolePrefill
		case 2:
			m.Role = RoleDecode
		default: // both is written in the older formats
			d.fail()
		}
	}
	if d.err != nil || len(d.b) != 0 || m.ID == "" || m.ID != name {
		return nil, errMalformed
	}
	return m, nil
}
