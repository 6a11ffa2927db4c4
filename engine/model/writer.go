package model

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// Writer builds a GGUF version 3 file: metadata in the order it was first
// set, then tensors in the order they were added, each aligned to the
// file's alignment (32 bytes unless SetAlignment says otherwise). It holds
// all tensor data in memory, so it suits tests and small generated models.
//
// The Set methods record the first invalid key or value and WriteTo
// returns it; Set and AddTensor also return it directly.
type Writer struct {
	alignment int
	kvs       []ggufWriterKV
	kvIndex   map[string]int
	tensors   []ggufWriterTensor
	byName    map[string]int
	err       error
}

type ggufWriterKV struct {
	key string
	val any
}

type ggufWriterTensor struct {
	name string
	dims []uint64
	typ  TensorType
	data []byte
}

// NewWriter returns an empty writer with the default 32-byte alignment.
func NewWriter() *Writer {
	return &Writer{alignment: ggufDefaultAlignment, kvIndex: map[string]int{}, byName: map[string]int{}}
}

// Set sets key to v, replacing an earlier value but keeping its position.
// v is one of uint8, int8, uint16, int16, uint32, int32, uint64, int64,
// float32, float64, bool, string, a slice of one of those, or []any of
// such slices (an array of arrays). Setting general.alignment (a uint32
// power of two) also sets the alignment used to lay out tensor data.
func (w *Writer) Set(key string, v any) error { return w.set(key, v) }

func (w *Writer) set(key string, v any) error {
	err := func() error {
		if key == "" || len(key) > ggufMaxKeyLen {
			return fmt.Errorf("gguf: writer: invalid key of %d bytes", len(key))
		}
		if _, err := ggufWriterValueType(v, 0); err != nil {
			return fmt.Errorf("gguf: writer: key %q: %w", key, err)
		}
		if key == "general.alignment" {
			a, ok := v.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return fmt.Errorf("gguf: writer: general.alignment must be a uint32 power of two, not %v", v)
			}
			w.alignment = int(a)
		}
		return nil
	}()
	if err != nil {
		if w.err == nil {
			w.err = err
		}
		return err
	}
	if i, ok := w.kvIndex[key]; ok {
		w.kvs[i].val = v
		return nil
	}
	w.kvIndex[key] = len(w.kvs)
	w.kvs = append(w.kvs, ggufWriterKV{key, v})
	return nil
}

// SetAlignment sets the tensor data alignment in bytes (a power of two)
// and records it as general.alignment.
func (w *Writer) SetAlignment(n int) error {
	if n <= 0 || n > 1<<30 || n&(n-1) != 0 {
		return w.fail(fmt.Errorf("gguf: writer: alignment %d is not a power of two", n))
	}
	return w.set("general.alignment", uint32(n))
}

// SetString sets a string value.
func (w *Writer) SetString(key, v string) { _ = w.set(key, v) }

// SetBool sets a bool value.
func (w *Writer) SetBool(key string, v bool) { _ = w.set(key, v) }

// SetUint8 sets a uint8 value.
func (w *Writer) SetUint8(key string, v uint8) { _ = w.set(key, v) }

// SetInt8 sets an int8 value.
func (w *Writer) SetInt8(key string, v int8) { _ = w.set(key, v) }

// SetUint16 sets a uint16 value.
func (w *Writer) SetUint16(key string, v uint16) { _ = w.set(key, v) }

// SetInt16 sets an int16 value.
func (w *Writer) SetInt16(key string, v int16) { _ = w.set(key, v) }

// SetUint32 sets a uint32 value.
func (w *Writer) SetUint32(key string, v uint32) { _ = w.set(key, v) }

// SetInt32 sets an int32 value.
func (w *Writer) SetInt32(key string, v int32) { _ = w.set(key, v) }

// SetUint64 sets a uint64 value.
func (w *Writer) SetUint64(key string, v uint64) { _ = w.set(key, v) }

// SetInt64 sets an int64 value.
func (w *Writer) SetInt64(key string, v int64) { _ = w.set(key, v) }

// SetFloat32 sets a float32 value.
func (w *Writer) SetFloat32(key string, v float32) { _ = w.set(key, v) }

// SetFloat64 sets a float64 value.
func (w *Writer) SetFloat64(key string, v float64) { _ = w.set(key, v) }

// SetStrings sets an array of strings. The writer keeps v: do not modify
// it before WriteTo.
func (w *Writer) SetStrings(key string, v []string) { _ = w.set(key, v) }

// SetFloat32s sets an array of float32 values. The writer keeps v.
func (w *Writer) SetFloat32s(key string, v []float32) { _ = w.set(key, v) }

// SetInt32s sets an array of int32 values. The writer keeps v.
func (w *Writer) SetInt32s(key string, v []int32) { _ = w.set(key, v) }

// AddTensor quantizes data to typ and adds it as tensor name with dims in
// ggml order (dims[0] is the row length, a multiple of typ's block size).
// len(data) must be the product of dims.
func (w *Writer) AddTensor(name string, dims []uint64, typ TensorType, data []float32) error {
	n, err := w.checkTensor(name, dims, typ)
	if err != nil {
		return err
	}
	if uint64(len(data)) != n {
		return w.fail(fmt.Errorf("gguf: writer: tensor %q: %d values for dims %v (%d values)", name, len(data), dims, n))
	}
	raw, err := Quantize(typ, data)
	if err != nil {
		return w.fail(fmt.Errorf("gguf: writer: tensor %q: %w", name, err))
	}
	w.addTensor(name, dims, typ, raw)
	return nil
}

// AddTensorData adds already encoded data of type typ as tensor name. The
// writer keeps raw: do not modify it before WriteTo.
func (w *Writer) AddTensorData(name string, dims []uint64, typ TensorType, raw []byte) error {
	n, err := w.checkTensor(name, dims, typ)
	if err != nil {
		return err
	}
	want, err := typ.RowBytes(int(n))
	if err != nil || len(raw) != want {
		return w.fail(fmt.Errorf("gguf: writer: tensor %q: %d bytes for dims %v of %s", name, len(raw), dims, typ))
	}
	w.addTensor(name, dims, typ, raw)
	return nil
}

func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	return err
}

// checkTensor validates a tensor's name, dims and type and returns its
// element count.
func (w *Writer) checkTensor(name string, dims []uint64, typ TensorType) (uint64, error) {
	if name == "" || len(name) > ggufMaxTensorName {
		return 0, w.fail(fmt.Errorf("gguf: writer: tensor name %q must be 1 to %d bytes", name, ggufMaxTensorName))
	}
	if _, dup := w.byName[name]; dup {
		return 0, w.fail(fmt.Errorf("gguf: writer: duplicate tensor %q", name))
	}
	if !typ.Supported() {
		return 0, w.fail(&UnsupportedTypeError{Tensor: name, Type: uint32(typ)})
	}
	if len(dims) == 0 || len(dims) > ggufMaxDims {
		return 0, w.fail(fmt.Errorf("gguf: writer: tensor %q has %d dimensions (want 1 to %d)", name, len(dims), ggufMaxDims))
	}
	n := uint64(1)
	for _, d := range dims {
		hi, lo := bits.Mul64(n, d)
		if d == 0 || hi != 0 || lo > 1<<48 {
			return 0, w.fail(fmt.Errorf("gguf: writer: tensor %q has invalid dims %v", name, dims))
		}
		n = lo
	}
	if dims[0]%uint64(typ.BlockSize()) != 0 {
		return 0, w.fail(fmt.Errorf("gguf: writer: tensor %q row length %d is not a multiple of the %s block size %d", name, dims[0], typ, typ.BlockSize()))
	}
	return n, nil
}

func (w *Writer) addTensor(name string, dims []uint64, typ TensorType, raw []byte) {
	w.byName[name] = len(w.tensors)
	w.tensors = append(w.tensors, ggufWriterTensor{name: name, dims: append([]uint64(nil), dims...), typ: typ, data: raw})
}

// WriteTo writes the file to out and returns the number of bytes written.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	if w.err != nil {
		return 0, w.err
	}
	cw := &ggufCountingWriter{w: out}
	bw := bufio.NewWriterSize(cw, 1<<16)
	le := binary.LittleEndian

	head := make([]byte, 0, 1<<12)
	head = le.AppendUint32(head, ggufMagic)
	head = le.AppendUint32(head, 3)
	head = le.AppendUint64(head, uint64(len(w.tensors)))
	head = le.AppendUint64(head, uint64(len(w.kvs)))
	for _, kv := range w.kvs {
		head = ggufAppendString(head, kv.key)
		typ, _ := ggufWriterValueType(kv.val, 0) // checked by set
		head = le.AppendUint32(head, typ)
		head = ggufAppendValue(head, kv.val)
	}
	align := uint64(w.alignment)
	var off uint64
	for _, t := range w.tensors {
		head = ggufAppendString(head, t.name)
		head = le.AppendUint32(head, uint32(len(t.dims)))
		for _, d := range t.dims {
			head = le.AppendUint64(head, d)
		}
		head = le.AppendUint32(head, uint32(t.typ))
		head = le.AppendUint64(head, off)
		off += (uint64(len(t.data)) + align - 1) / align * align
	}
	if len(w.tensors) > 0 {
		head = append(head, make([]byte, (align-uint64(len(head))%align)%align)...)
	}
	if _, err := bw.Write(head); err != nil {
		return cw.n, err
	}
	for _, t := range w.tensors {
		if _, err := bw.Write(t.data); err != nil {
			return cw.n, err
		}
		pad := (align - uint64(len(t.data))%align) % align
		if _, err := bw.Write(make([]byte, pad)); err != nil {
			return cw.n, err
		}
	}
	err := bw.Flush()
	return cw.n, err
}

// WriteFile writes the file to path atomically: it writes a temporary
// file in the same directory and renames it.
func (w *Writer) WriteFile(path string) (err error) {
	if w.err != nil {
		return w.err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = w.WriteTo(tmp); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	// CreateTemp makes the file private; a model file is readable by all,
	// like any file the user writes.
	if err = os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

type ggufCountingWriter struct {
	w io.Writer
	n int64
}

func (c *ggufCountingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func ggufAppendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// ggufWriterValueType returns the GGUF value type of v, checking that
// nested arrays hold supported values; depth counts enclosing arrays.
func ggufWriterValueType(v any, depth int) (uint32, error) {
	switch v := v.(type) {
	case uint8:
		return ggufTypeUint8, nil
	case int8:
		return ggufTypeInt8, nil
	case uint16:
		return ggufTypeUint16, nil
	case int16:
		return ggufTypeInt16, nil
	case uint32:
		return ggufTypeUint32, nil
	case int32:
		return ggufTypeInt32, nil
	case float32:
		return ggufTypeFloat32, nil
	case bool:
		return ggufTypeBool, nil
	case string:
		return ggufTypeString, nil
	case uint64:
		return ggufTypeUint64, nil
	case int64:
		return ggufTypeInt64, nil
	case float64:
		return ggufTypeFloat64, nil
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []bool, []string, []uint64, []int64, []float64:
		if depth >= ggufMaxArrayDepth {
			return 0, fmt.Errorf("arrays nested deeper than %d", ggufMaxArrayDepth)
		}
		return ggufTypeArray, nil
	case []any:
		if depth+1 >= ggufMaxArrayDepth {
			return 0, fmt.Errorf("arrays nested deeper than %d", ggufMaxArrayDepth)
		}
		for _, e := range v {
			t, err := ggufWriterValueType(e, depth+1)
			if err != nil {
				return 0, err
			}
			if t != ggufTypeArray {
				return 0, errors.New("an array of arrays holds a non-array")
			}
		}
		return ggufTypeArray, nil
	}
	return 0, fmt.Errorf("unsupported value type %T", v)
}

// ggufAppendValue appends the encoding of v, whose type
// ggufWriterValueType accepted; arrays include their element type and
// count.
func ggufAppendValue(b []byte, v any) []byte {
	le := binary.LittleEndian
	arr := func(elem uint32, n int) []byte {
		b = le.AppendUint32(b, elem)
		return le.AppendUint64(b, uint64(n))
	}
	switch v := v.(type) {
	case uint8:
		return append(b, v)
	case int8:
		return append(b, byte(v))
	case uint16:
		return le.AppendUint16(b, v)
	case int16:
		return le.AppendUint16(b, uint16(v))
	case uint32:
		return le.AppendUint32(b, v)
	case int32:
		return le.AppendUint32(b, uint32(v))
	case float32:
		return le.AppendUint32(b, math.Float32bits(v))
	case bool:
		if v {
			return append(b, 1)
		}
		return append(b, 0)
	case string:
		return ggufAppendString(b, v)
	case uint64:
		return le.AppendUint64(b, v)
	case int64:
		return le.AppendUint64(b, uint64(v))
	case float64:
		return le.AppendUint64(b, math.Float64bits(v))
	case []uint8:
		b = arr(ggufTypeUint8, len(v))
		return append(b, v...)
	case []int8:
		b = arr(ggufTypeInt8, len(v))
		for _, x := range v {
			b = append(b, byte(x))
		}
	case []uint16:
		b = arr(ggufTypeUint16, len(v))
		for _, x := range v {
			b = le.AppendUint16(b, x)
		}
	case []int16:
		b = arr(ggufTypeInt16, len(v))
		for _, x := range v {
			b = le.AppendUint16(b, uint16(x))
		}
	case []uint32:
		b = arr(ggufTypeUint32, len(v))
		for _, x := range v {
			b = le.AppendUint32(b, x)
		}
	case []int32:
		b = arr(ggufTypeInt32, len(v))
		for _, x := range v {
			b = le.AppendUint32(b, uint32(x))
		}
	case []float32:
		b = arr(ggufTypeFloat32, len(v))
		for _, x := range v {
			b = le.AppendUint32(b, math.Float32bits(x))
		}
	case []bool:
		b = arr(ggufTypeBool, len(v))
		for _, x := range v {
			b = ggufAppendValue(b, x)
		}
	case []string:
		b = arr(ggufTypeString, len(v))
		for _, x := range v {
			b = ggufAppendString(b, x)
		}
	case []uint64:
		b = arr(ggufTypeUint64, len(v))
		for _, x := range v {
			b = le.AppendUint64(b, x)
		}
	case []int64:
		b = arr(ggufTypeInt64, len(v))
		for _, x := range v {
			b = le.AppendUint64(b, uint64(x))
		}
	case []float64:
		b = arr(ggufTypeFloat64, len(v))
		for _, x := range v {
			b = le.AppendUint64(b, math.Float64bits(x))
		}
	case []any:
		b = arr(ggufTypeArray, len(v))
		for _, x := range v {
			b = ggufAppendValue(b, x)
		}
	}
	return b
}

// RandomModel describes a model of the given shape with random weights
// drawn from a fixed seed, for tests and `llmctl model init`. Zero fields
// take the defaults named in their comments.
type RandomModel struct {
	Arch                                    string // "llama" or "qwen2"
	Name                                    string // general.name
	Dim, Layers, Heads, KVHeads, FFN, Vocab int
	HeadDim                                 int        // 0: Dim/Heads
	ContextLength                           int        // 0: 2048
	RopeBase                                float64    // 0: 10000 (llama), 1000000 (qwen2)
	RMSEps                                  float64    // 0: 1e-5 (llama), 1e-6 (qwen2)
	Type                                    TensorType // type of the 2-D weights; norms and biases stay F32
	Tied                                    bool       // no output.weight: logits use token_embd
	Seed                                    uint64     // seed of the weight draws
}

// Writer returns a writer holding the model's architecture metadata and
// weights: token_embd, per layer attention (with q/k/v biases for qwen2)
// and SwiGLU FFN, output_norm and, unless Tied, output. The caller adds
// tokenizer metadata before writing. Rows whose length is not a multiple
// of a K-quant's 256 fall back as llama-quantize does (Q4_K to Q5_0, Q6_K
// to Q8_0), and to F16 when not a multiple of 32.
//
// Weights are N(0, (g/√fan_in)²) with g = 0.5 for attn_output and ffn_down
// and 1 otherwise; token_embd is N(0, 1), or N(0, 1/16²) when tied; norm
// weights are U(0.75, 1.25); qwen2 biases are N(0, 0.1²).
func (m RandomModel) Writer() (*Writer, error) {
	if m.Arch != "llama" && m.Arch != "qwen2" {
		return nil, fmt.Errorf("model: random model: architecture %q is not supported (want llama or qwen2)", m.Arch)
	}
	if m.HeadDim == 0 && m.Heads > 0 {
		m.HeadDim = m.Dim / m.Heads
	}
	if m.KVHeads == 0 {
		m.KVHeads = m.Heads
	}
	if m.ContextLength == 0 {
		m.ContextLength = 2048
	}
	qwen := m.Arch == "qwen2"
	if m.RopeBase == 0 {
		m.RopeBase = map[bool]float64{false: 10000, true: 1000000}[qwen]
	}
	if m.RMSEps == 0 {
		m.RMSEps = map[bool]float64{false: 1e-5, true: 1e-6}[qwen]
	}
	const maxSide = 1 << 20
	for _, c := range []struct {
		name string
		v    int
	}{{"dim", m.Dim}, {"layers", m.Layers}, {"heads", m.Heads}, {"kv heads", m.KVHeads}, {"ffn", m.FFN}, {"vocab", m.Vocab}, {"head dim", m.HeadDim}} {
		if c.v <= 0 || c.v > maxSide {
			return nil, fmt.Errorf("model: random model: %s %d out of range (1 to %d)", c.name, c.v, maxSide)
		}
	}
	if m.Layers > 1024 || m.Heads%m.KVHeads != 0 || m.HeadDim%2 != 0 {
		return nil, fmt.Errorf("model: random model: want layers <= 1024, heads (%d) a multiple of kv heads (%d) and an even head dim (%d)", m.Heads, m.KVHeads, m.HeadDim)
	}
	if !m.Type.Supported() {
		return nil, &UnsupportedTypeError{Type: uint32(m.Type)}
	}

	w := NewWriter()
	a := m.Arch + "."
	w.SetString("general.architecture", m.Arch)
	if m.Name != "" {
		w.SetString("general.name", m.Name)
	}
	w.SetUint32("general.file_type", ggufFileTypeOf(m.Type))
	if m.Type.BlockSize() > 1 {
		w.SetUint32("general.quantization_version", 2)
	}
	w.SetUint32(a+"context_length", uint32(m.ContextLength))
	w.SetUint32(a+"embedding_length", uint32(m.Dim))
	w.SetUint32(a+"block_count", uint32(m.Layers))
	w.SetUint32(a+"feed_forward_length", uint32(m.FFN))
	w.SetUint32(a+"attention.head_count", uint32(m.Heads))
	w.SetUint32(a+"attention.head_count_kv", uint32(m.KVHeads))
	w.SetFloat32(a+"attention.layer_norm_rms_epsilon", float32(m.RMSEps))
	w.SetFloat32(a+"rope.freq_base", float32(m.RopeBase))
	w.SetUint32(a+"rope.dimension_count", uint32(m.HeadDim))
	if m.HeadDim != m.Dim/m.Heads {
		w.SetUint32(a+"attention.key_length", uint32(m.HeadDim))
		w.SetUint32(a+"attention.value_length", uint32(m.HeadDim))
	}
	w.SetUint32(a+"vocab_size", uint32(m.Vocab))

	rng := rand.New(rand.NewPCG(m.Seed, m.Seed^0x9e3779b97f4a7c15))
	normal := func(n int, std float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * std)
		}
		return v
	}
	uniform := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(0.75 + 0.5*rng.Float64())
		}
		return v
	}
	matrix := func(name string, in, out int, g float64) error {
		return w.AddTensor(name, []uint64{uint64(in), uint64(out)}, ggufRowType(m.Type, in), normal(in*out, g/math.Sqrt(float64(in))))
	}
	vec := func(name string, v []float32) error {
		return w.AddTensor(name, []uint64{uint64(len(v))}, TypeF32, v)
	}
	embStd := 1.0
	if m.Tied {
		embStd = 1.0 / 16
	}
	emb := normal(m.Dim*m.Vocab, embStd)
	if err := w.AddTensor("token_embd.weight", []uint64{uint64(m.Dim), uint64(m.Vocab)}, ggufRowType(m.Type, m.Dim), emb); err != nil {
		return nil, err
	}
	q, kv := m.Heads*m.HeadDim, m.KVHeads*m.HeadDim
	for l := range m.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		errs := []error{
			vec(p+"attn_norm.weight", uniform(m.Dim)),
			matrix(p+"attn_q.weight", m.Dim, q, 1),
			matrix(p+"attn_k.weight", m.Dim, kv, 1),
			matrix(p+"attn_v.weight", m.Dim, kv, 1),
		}
		if qwen {
			errs = append(errs,
				vec(p+"attn_q.bias", normal(q, 0.1)),
				vec(p+"attn_k.bias", normal(kv, 0.1)),
				vec(p+"attn_v.bias", normal(kv, 0.1)))
		}
		errs = append(errs,
			matrix(p+"attn_output.weight", q, m.Dim, 0.5),
			vec(p+"ffn_norm.weight", uniform(m.Dim)),
			matrix(p+"ffn_gate.weight", m.Dim, m.FFN, 1),
			matrix(p+"ffn_up.weight", m.Dim, m.FFN, 1),
			matrix(p+"ffn_down.weight", m.FFN, m.Dim, 0.5))
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
	}
	if err := vec("output_norm.weight", uniform(m.Dim)); err != nil {
		return nil, err
	}
	if !m.Tied {
		if err := matrix("output.weight", m.Dim, m.Vocab, 1); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// ggufRowType returns the type to store rows of length n as when t was
// asked for: llama-quantize's K-quant fallbacks, then F16 when the row is
// not whole blocks.
func ggufRowType(t TensorType, n int) TensorType {
	if n%t.BlockSize() == 0 {
		return t
	}
	switch t {
	case TypeQ4_K:
		return ggufRowType(TypeQ5_0, n)
	case TypeQ6_K:
		return ggufRowType(TypeQ8_0, n)
	}
	return TypeF16
}

// ggufFileTypeOf returns the general.file_type (llama_ftype) of a model
// whose matrices are mostly of type t.
func ggufFileTypeOf(t TensorType) uint32 {
	switch t {
	case TypeF32:
		return 0
	case TypeF16:
		return 1
	case TypeQ4_0:
		return 2
	case TypeQ8_0:
		return 7
	case TypeQ5_0:
		return 8
	case TypeQ4_K:
		return 14 // Q4_K_S
	case TypeQ6_K:
		return 18
	case TypeBF16:
		return 32
	}
	return 0
}
