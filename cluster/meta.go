package cluster

import (
	"github.com/hashicorp/memberlist"
)

// metaFormat is the first byte of the node metadata.
const metaFormat byte = 1

// nodeMeta is what a node says about itself in memberlist's NodeMeta.
type nodeMeta struct {
	ID, APIAddr, Version string
	Models               []string
}

func (m *nodeMeta) encode() []byte {
	e := encoder{make([]byte, 0, 64)}
	e.byte(metaFormat)
	e.str(m.ID)
	e.str(m.APIAddr)
	e.str(m.Version)
	e.uvarint(uint64(len(m.Models)))
	for _, s := range m.Models {
		e.str(s)
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
	if d.byte() != metaFormat {
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
	if d.err != nil || len(d.b) != 0 || m.ID == "" || m.ID != name {
		return nil, errMalformed
	}
	return m, nil
}
