package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
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
