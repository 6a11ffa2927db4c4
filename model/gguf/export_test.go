package gguf

// Internals for the external tests (package gguf_test: gguf_test.go and
// fixtures_test.go), which check the reader against models from
// model/synth and specs from model and so cannot be in package gguf.
const (
	Magic              = ggufMagic
	MaxTensorName      = ggufMaxTensorName
	MinKVBytes         = ggufMinKVBytes
	MinTensorInfoBytes = ggufMinTensorInfoBytes

	ValueTypeUint8  = ggufTypeUint8
	ValueTypeUint32 = ggufTypeUint32
	ValueTypeUint64 = ggufTypeUint64
	ValueTypeBool   = ggufTypeBool
	ValueTypeString = ggufTypeString
	ValueTypeArray  = ggufTypeArray
)

var (
	QuantAllTypes     = quantAllTypes
	QuantRequireClose = quantRequireClose
)
