package cluster

import (
	"github.com/hashicorp/memberlist"
)

// The first byte of the node metadata: metaFormat, or metaFormatZone when
// a zone follows the models (a node without a zone writes the first, which
// nodes of earlier versions read).
const (
	metaFormat     byte = 1
	metaFormatZone byte = 2
)

// nodeMeta is what a node says about itself in memberlist's NodeMeta.
type nodeMeta struct {
	ID, APIAddr, Version string
	Models               []string
	Zone                 string
}

func (m *nodeMeta) encode() []byte {
	e := encoder{make([]byte, 0, 64)}
	if m.Zone != "" {
		e.byte(metaFormatZone)
	} else {
		e.byte(metaFormat)
	}
	e.str(m.ID)
	e.str(m.APIAddr)
	e.str(m.Version)
	e.uvarint(uint64(len(m.Models)))
	for _, s := range m.Models {
		e.str(s)
	}
	if m.Zone != "" {
		e.str(m.Zone)
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
	if format != metaFormat && format != metaFormatZone {
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
	if format == metaFormatZone {
		if m.Zone = d.str(maxNodeIDBytes); m.Zone == "" {
			d.fail()
		}
	}
	if d.err != nil || len(d.b) != 0 || m.ID == "" || m.ID != name {
		return nil, errMalformed
	}
	return m, nil
}
