package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"slices"
	"strings"
)

// GGUF limits. Model files are untrusted: every count, length and offset
// is checked against the bytes that remain before anything is allocated,
// and these caps bound what a valid-looking file can make the reader do.
const (
	ggufMagic = 0x46554747 // "GGUF" little-endian

	// ggufDefaultAlignment is the tensor data alignment when the file has no
	// general.alignment key, in bytes.
	ggufDefaultAlignment = 32
	// ggufMaxMetadataBytes caps the key/value section (tokenizer
	// vocabularies and merges are its bulk: a few tens of MiB).
	ggufMaxMetadataBytes = 512 << 20
	// ggufMaxArrayDepth is how deep arrays may nest: an array of arrays of
	// scalars is depth 2.
	ggufMaxArrayDepth = 2
	// ggufMaxKeyLen and ggufMaxTensorName bound key and tensor name
	// lengths in bytes (ggml's GGML_MAX_NAME is 64).
	ggufMaxKeyLen     = 1 << 16
	ggufMaxTensorName = 64
	// ggufMaxDims is ggml's GGML_MAX_DIMS.
	ggufMaxDims = 4
	// ggufHeaderSize is magic, version, tensor count and key/value count.
	ggufHeaderSize = 24
	// ggufMinKVBytes is the smallest key/value entry: a key length, a value
	// type and a one byte value (an empty key is refused after reading).
	ggufMinKVBytes = 8 + 4 + 1
	// ggufMinTensorInfoBytes is the smallest tensor info: name length, a
	// one byte name, n_dims, one dimension, type and offset.
	ggufMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8
)

// GGUF metadata value types.
const (
	ggufTypeUint8   uint32 = 0
	ggufTypeInt8    uint32 = 1
	ggufTypeUint16  uint32 = 2
	ggufTypeInt16   uint32 = 3
	ggufTypeUint32  uint32 = 4
	ggufTypeInt32   uint32 = 5
	ggufTypeFloat32 uint32 = 6
	ggufTypeBool    uint32 = 7
	ggufTypeString  uint32 = 8
	ggufTypeArray   uint32 = 9
	ggufTypeUint64  uint32 = 10
	ggufTypeInt64   uint32 = 11
	ggufTypeFloat64 uint32 = 12
)

// ggufScalarSize returns the encoded size in bytes of a fixed-size value
// type, or 0 for strings, arrays and unknown types.
func ggufScalarSize(t uint32) int {
	switch t {
	case ggufTypeUint8, ggufTypeInt8, ggufTypeBool:
		return 1
	case ggufTypeUint16, ggufTypeInt16:
		return 2
	case ggufTypeUint32, ggufTypeInt32, ggufTypeFloat32:
		return 4
	case ggufTypeUint64, ggufTypeInt64, ggufTypeFloat64:
		return 8
	}
	return 0
}

// ErrNotGGUF reports a file that does not start with the GGUF magic.
var ErrNotGGUF = errors.New("gguf: not a GGUF file (bad magic)")

// FormatError reports a malformed GGUF file: Offset is the byte offset in
// the file where the problem was found. A truncated file unwraps to
// io.ErrUnexpectedEOF.
type FormatError struct {
	Offset int64
	Reason string
	Err    error // optional cause, e.g. io.ErrUnexpectedEOF
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("gguf: malformed file at offset %d: %s", e.Offset, e.Reason)
}

func (e *FormatError) Unwrap() error { return e.Err }

// UnsupportedTypeError reports a tensor whose ggml type this package cannot
// read. Tensor is empty when the error did not come from a file.
type UnsupportedTypeError struct {
	Tensor string
	Type   uint32
}

func (e *UnsupportedTypeError) Error() string {
	if e.Tensor == "" {
		return fmt.Sprintf("gguf: tensor type %s (%d) is not supported", TensorType(e.Type), e.Type)
	}
	return fmt.Sprintf("gguf: tensor %q has type %s (%d), which is not supported (supported: F32, F16, BF16, Q4_0, Q5_0, Q8_0, Q4_K, Q6_K)",
		e.Tensor, TensorType(e.Type), e.Type)
}

// TensorInfo describes one tensor of a GGUF file.
type TensorInfo struct {
	Name string
	// Dims are the dimensions in ggml order: Dims[0] (ne0) is the
	// contiguous row length. A matrix [in, out] holds out rows of in values.
	Dims []uint64
	Type TensorType
	// Offset is the tensor's byte offset from the start of the data section.
	Offset uint64
	// Size is the tensor's size in bytes.
	Size uint64
}

// Elements returns the number of values in the tensor.
func (t TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// File is a parsed GGUF file: its metadata, tensor infos and a view of the
// tensor data. A File from Open maps the file read-only and must be closed;
// metadata stays valid after Close, tensor data does not. *File implements
// Metadata. A File is safe for concurrent reads; Close must not race with
// them.
type File struct {
	Version uint32
	// Alignment is the tensor data alignment in bytes (general.alignment,
	// default 32).
	Alignment int
	// Tensors are the tensor infos in file order.
	Tensors []TensorInfo
	// DataOffset is the byte offset of the tensor data section in the file.
	DataOffset int64

	kv     map[string]any
	keys   []string // sorted
	byName map[string]int
	data   []byte // the whole file
	unmap  func([]byte) error
}

var _ Metadata = (*File)(nil)

// Open memory-maps the GGUF file at path read-only and parses it. Tensor
// data is not copied: [File.TensorData] returns slices of the mapping,
// valid until Close. Truncating the file while it is mapped can crash the
// process (SIGBUS), as with any mapping.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gguf: %s is not a regular file", path)
	}
	size := st.Size()
	if size < ggufHeaderSize {
		// Too small to map usefully: parse the few bytes for the error.
		b, err := io.ReadAll(io.LimitReader(fh, ggufHeaderSize))
		if err != nil {
			return nil, err
		}
		_, err = Parse(b)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if uint64(size) > math.MaxInt {
		return nil, fmt.Errorf("gguf: %s: file of %d bytes is too large to map", path, size)
	}
	data, unmap, err := ggufMap(fh, int(size))
	if err != nil {
		return nil, fmt.Errorf("gguf: map %s: %w", path, err)
	}
	f, err := Parse(data)
	if err != nil {
		_ = unmap(data)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.unmap = unmap
	return f, nil
}

// Close releases the file's mapping. Tensor data slices must not be used
// afterwards; metadata and tensor infos stay valid. Close is idempotent.
func (f *File) Close() error {
	if f.unmap == nil {
		f.data = nil
		return nil
	}
	unmap, data := f.unmap, f.data
	f.unmap, f.data = nil, nil
	return unmap(data)
}

// Tensor returns the info of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// TensorData returns the bytes of t, which must come from f, without
// copying: the slice aliases the mapped file (or Parse's input) and is
// valid until Close. It must not be modified. It returns nil when t lies
// outside the data section or f is closed.
func (f *File) TensorData(t TensorInfo) []byte {
	start, c1 := bits.Add64(uint64(f.DataOffset), t.Offset, 0)
	end, c2 := bits.Add64(start, t.Size, 0)
	if c1 != 0 || c2 != 0 || end > uint64(len(f.data)) {
		return nil
	}
	return f.data[start:end:end]
}

// Keys returns the metadata keys in sorted order. The caller must not
// modify the slice.
func (f *File) Keys() []string { return f.keys }

// Value returns the metadata value of key: uint8, int8, uint16, int16,
// uint32, int32, uint64, int64, float32, float64, bool or string; an array
// is a slice of one of those ([]uint8 ... []string), or []any of such
// slices for an array of arrays. The caller must not modify it.
func (f *File) Value(key string) (any, bool) {
	v, ok := f.kv[key]
	return v, ok
}

// String implements Metadata.
func (f *File) String(key string) (string, bool) {
	v, ok := f.kv[key].(string)
	return v, ok
}

// Uint implements Metadata: any integer type that is not negative.
func (f *File) Uint(key string) (uint64, bool) {
	switch v := f.kv[key].(type) {
	case uint8:
		return uint64(v), true
	case uint16:
		return uint64(v), true
	case uint32:
		return uint64(v), true
	case uint64:
		return v, true
	case int8, int16, int32, int64:
		i := ggufSignedValue(v)
		if i < 0 {
			return 0, false
		}
		return uint64(i), true
	}
	return 0, false
}

// Int implements Metadata: any integer type that fits int64.
func (f *File) Int(key string) (int64, bool) {
	switch v := f.kv[key].(type) {
	case int8, int16, int32, int64:
		return ggufSignedValue(v), true
	case uint8:
		return int64(v), true
	case uint16:
		return int64(v), true
	case uint32:
		return int64(v), true
	case uint64:
		if v > math.MaxInt64 {
			return 0, false
		}
		return int64(v), true
	}
	return 0, false
}

func ggufSignedValue(v any) int64 {
	switch v := v.(type) {
	case int8:
		return int64(v)
	case int16:
		return int64(v)
	case int32:
		return int64(v)
	case int64:
		return v
	}
	return 0
}

// Float implements Metadata: float32 or float64.
func (f *File) Float(key string) (float64, bool) {
	switch v := f.kv[key].(type) {
	case float32:
		return float64(v), true
	case float64:
		return v, true
	}
	return 0, false
}

// Bool implements Metadata.
func (f *File) Bool(key string) (bool, bool) {
	v, ok := f.kv[key].(bool)
	return v, ok
}

// Strings implements Metadata. The slice is shared: do not modify it.
func (f *File) Strings(key string) ([]string, bool) {
	v, ok := f.kv[key].([]string)
	return v, ok
}

// Float32s implements Metadata. The slice is shared: do not modify it.
func (f *File) Float32s(key string) ([]float32, bool) {
	v, ok := f.kv[key].([]float32)
	return v, ok
}

// Int32s implements Metadata. An int32 array is returned shared (do not
// modify it); an array of another integer type whose values all fit int32
// is converted into a new slice.
func (f *File) Int32s(key string) ([]int32, bool) {
	switch v := f.kv[key].(type) {
	case []int32:
		return v, true
	case []int8:
		return ggufConvertInts(v)
	case []uint8:
		return ggufConvertInts(v)
	case []int16:
		return ggufConvertInts(v)
	case []uint16:
		return ggufConvertInts(v)
	case []uint32:
		return ggufConvertInts(v)
	case []int64:
		return ggufConvertInts(v)
	case []uint64:
		return ggufConvertInts(v)
	}
	return nil, false
}

func ggufConvertInts[T int8 | uint8 | int16 | uint16 | uint32 | int64 | uint64](v []T) ([]int32, bool) {
	out := make([]int32, len(v))
	for i, x := range v {
		if int64(x) < math.MinInt32 || int64(x) > math.MaxInt32 || (x > 0 && uint64(x) > math.MaxInt32) {
			return nil, false
		}
		out[i] = int32(x)
	}
	return out, true
}

// arrayLen returns the length of an array value, or -1 when key is absent
// or not an array.
func (f *File) arrayLen(key string) int {
	switch v := f.kv[key].(type) {
	case []uint8:
		return len(v)
	case []int8:
		return len(v)
	case []uint16:
		return len(v)
	case []int16:
		return len(v)
	case []uint32:
		return len(v)
	case []int32:
		return len(v)
	case []uint64:
		return len(v)
	case []int64:
		return len(v)
	case []float32:
		return len(v)
	case []float64:
		return len(v)
	case []bool:
		return len(v)
	case []string:
		return len(v)
	case []any:
		return len(v)
	}
	return -1
}

// Parse parses a GGUF file held in data. The File aliases data (tensor
// data is not copied), so data must stay unchanged while the File is used;
// metadata is copied. Parse never panics on malformed input: it returns
// ErrNotGGUF, a *FormatError or an *UnsupportedTypeError.
func Parse(data []byte) (*File, error) {
	r := &ggufReader{data: data, end: len(data)}
	if len(data) < 4 || binary.LittleEndian.Uint32(data) != ggufMagic {
		return nil, ErrNotGGUF
	}
	r.pos = 4
	version, err := r.u32("version")
	if err != nil {
		return nil, err
	}
	switch version {
	case 2, 3:
	case 0x02000000, 0x03000000:
		return nil, r.fail(4, "big-endian GGUF is not supported")
	default:
		return nil, r.fail(4, fmt.Sprintf("unsupported GGUF version %d (want 2 or 3)", version))
	}
	nTensors, err := r.u64("tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := r.u64("key/value count")
	if err != nil {
		return nil, err
	}
	f := &File{Version: version, Alignment: ggufDefaultAlignment, data: data}

	// Metadata: the key/value section may not exceed ggufMaxMetadataBytes.
	r.end = min(len(data), ggufHeaderSize+ggufMaxMetadataBytes)
	if err := r.checkCount(nKV, ggufMinKVBytes, "key/value count"); err != nil {
		return nil, err
	}
	// checkCount bounded nKV by the bytes that remain.
	f.kv = make(map[string]any, nKV)
	f.keys = make([]string, 0, nKV)
	for range nKV {
		at := r.pos
		key, err := r.str(ggufMaxKeyLen, "key")
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, r.fail(at, "empty metadata key")
		}
		if _, dup := f.kv[key]; dup {
			return nil, r.fail(at, fmt.Sprintf("duplicate metadata key %q", key))
		}
		typ, err := r.u32("value type")
		if err != nil {
			return nil, err
		}
		v, err := r.value(typ, 0)
		if err != nil {
			return nil, err
		}
		f.kv[key] = v
		f.keys = append(f.keys, key)
	}
	r.end = len(data)
	slices.Sort(f.keys)

	if v, ok := f.kv["general.alignment"]; ok {
		a, ok := f.Uint("general.alignment")
		if !ok || a == 0 || a&(a-1) != 0 || a > 1<<30 {
			return nil, r.fail(r.pos, fmt.Sprintf("general.alignment %v is not a power of two", v))
		}
		f.Alignment = int(a)
	}

	// Tensor infos.
	if err := r.checkCount(nTensors, ggufMinTensorInfoBytes, "tensor count"); err != nil {
		return nil, err
	}
	f.Tensors = make([]TensorInfo, 0, nTensors)
	f.byName = make(map[string]int, nTensors)
	for range nTensors {
		t, err := r.tensorInfo(f.Alignment)
		if err != nil {
			return nil, err
		}
		if _, dup := f.byName[t.Name]; dup {
			return nil, r.fail(r.pos, fmt.Sprintf("duplicate tensor %q", t.Name))
		}
		f.byName[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}

	// Tensor data starts at the next multiple of the alignment.
	pad := uint64((f.Alignment - r.pos%f.Alignment) % f.Alignment)
	start := uint64(r.pos) + pad
	if len(f.Tensors) == 0 {
		start = min(start, uint64(len(data)))
	}
	if start > uint64(len(data)) {
		return nil, r.truncated(r.pos, "padding before tensor data")
	}
	f.DataOffset = int64(start)
	avail := uint64(len(data)) - start
	for _, t := range f.Tensors {
		end, carry := bits.Add64(t.Offset, t.Size, 0)
		if carry != 0 || end > avail {
			return nil, &FormatError{
				Offset: int64(start),
				Reason: fmt.Sprintf("tensor %q: data at offset %d, %d bytes, runs past the end of the file (%d data bytes)", t.Name, t.Offset, t.Size, avail),
				Err:    io.ErrUnexpectedEOF,
			}
		}
	}
	return f, nil
}

// ggufReader decodes little-endian GGUF fields from data[pos:end].
type ggufReader struct {
	data []byte
	pos  int
	end  int // reads past end fail; end <= len(data)
}

func (r *ggufReader) fail(at int, reason string) error {
	return &FormatError{Offset: int64(at), Reason: reason}
}

func (r *ggufReader) truncated(at int, what string) error {
	if r.end < len(r.data) {
		return &FormatError{Offset: int64(at), Reason: fmt.Sprintf("%s: metadata exceeds %d bytes", what, ggufMaxMetadataBytes)}
	}
	return &FormatError{Offset: int64(at), Reason: fmt.Sprintf("truncated %s", what), Err: io.ErrUnexpectedEOF}
}

func (r *ggufReader) remaining() uint64 { return uint64(r.end - r.pos) }

// take returns the next n bytes.
func (r *ggufReader) take(n uint64, what string) ([]byte, error) {
	if n > r.remaining() {
		return nil, r.truncated(r.pos, what)
	}
	b := r.data[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b, nil
}

// checkCount fails unless count entries of at least minBytes each could
// fit in the remaining bytes. Call it before allocating for count entries.
func (r *ggufReader) checkCount(count uint64, minBytes int, what string) error {
	hi, need := bits.Mul64(count, uint64(minBytes))
	if hi != 0 || need > r.remaining() {
		if r.end < len(r.data) && hi == 0 && need <= uint64(len(r.data)-r.pos) {
			return r.fail(r.pos, fmt.Sprintf("%s %d: metadata exceeds %d bytes", what, count, ggufMaxMetadataBytes))
		}
		return &FormatError{
			Offset: int64(r.pos),
			Reason: fmt.Sprintf("%s %d needs at least %d bytes per entry, only %d bytes remain", what, count, minBytes, r.remaining()),
			Err:    io.ErrUnexpectedEOF,
		}
	}
	return nil
}

func (r *ggufReader) u8(what string) (uint8, error) {
	b, err := r.take(1, what)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (r *ggufReader) u16(what string) (uint16, error) {
	b, err := r.take(2, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(b), nil
}

func (r *ggufReader) u32(what string) (uint32, error) {
	b, err := r.take(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (r *ggufReader) u64(what string) (uint64, error) {
	b, err := r.take(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// strBytes returns the bytes of a length-prefixed string, aliasing data.
func (r *ggufReader) strBytes(maxLen uint64, what string) ([]byte, error) {
	at := r.pos
	if r.remaining() < 8 {
		return nil, r.truncated(at, what+" length")
	}
	n := binary.LittleEndian.Uint64(r.data[r.pos:])
	r.pos += 8
	if n > maxLen {
		return nil, r.fail(at, fmt.Sprintf("%s length %d exceeds %d", what, n, maxLen))
	}
	if n > r.remaining() {
		return nil, &FormatError{
			Offset: int64(at),
			Reason: fmt.Sprintf("%s length %d runs past the end (%d bytes remain)", what, n, r.remaining()),
			Err:    io.ErrUnexpectedEOF,
		}
	}
	return r.take(n, what)
}

func (r *ggufReader) str(maxLen uint64, what string) (string, error) {
	b, err := r.strBytes(maxLen, what)
	return string(b), err
}

// value decodes one metadata value of type typ; depth counts the arrays
// that enclose it.
func (r *ggufReader) value(typ uint32, depth int) (any, error) {
	at := r.pos
	switch typ {
	case ggufTypeUint8:
		return r.u8("uint8")
	case ggufTypeInt8:
		v, err := r.u8("int8")
		return int8(v), err
	case ggufTypeUint16:
		return r.u16("uint16")
	case ggufTypeInt16:
		v, err := r.u16("int16")
		return int16(v), err
	case ggufTypeUint32:
		return r.u32("uint32")
	case ggufTypeInt32:
		v, err := r.u32("int32")
		return int32(v), err
	case ggufTypeFloat32:
		v, err := r.u32("float32")
		return math.Float32frombits(v), err
	case ggufTypeBool:
		v, err := r.u8("bool")
		return v != 0, err
	case ggufTypeString:
		return r.str(math.MaxUint64, "string")
	case ggufTypeUint64:
		return r.u64("uint64")
	case ggufTypeInt64:
		v, err := r.u64("int64")
		return int64(v), err
	case ggufTypeFloat64:
		v, err := r.u64("float64")
		return math.Float64frombits(v), err
	case ggufTypeArray:
		if depth >= ggufMaxArrayDepth {
			return nil, r.fail(at, fmt.Sprintf("arrays nested deeper than %d", ggufMaxArrayDepth))
		}
		elem, err := r.u32("array element type")
		if err != nil {
			return nil, err
		}
		n, err := r.u64("array length")
		if err != nil {
			return nil, err
		}
		return r.array(elem, n, depth+1)
	}
	return nil, r.fail(at-4, fmt.Sprintf("unknown metadata value type %d", typ))
}

// array decodes n elements of type elem.
func (r *ggufReader) array(elem uint32, n uint64, depth int) (any, error) {
	at := r.pos
	minBytes := ggufScalarSize(elem)
	switch elem {
	case ggufTypeString:
		minBytes = 8
	case ggufTypeArray:
		minBytes = 12
	}
	if minBytes == 0 {
		return nil, r.fail(at-12, fmt.Sprintf("unknown array element type %d", elem))
	}
	if err := r.checkCount(n, minBytes, "array length"); err != nil {
		return nil, err
	}
	if size := ggufScalarSize(elem); size > 0 {
		b, err := r.take(n*uint64(size), "array")
		if err != nil {
			return nil, err
		}
		return ggufDecodeScalars(elem, b, int(n)), nil
	}
	switch elem {
	case ggufTypeString:
		return r.stringArray(int(n))
	default: // ggufTypeArray
		out := make([]any, n)
		for i := range out {
			v, err := r.value(ggufTypeArray, depth)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
}

// stringArray decodes n strings into one shared backing string: a first
// pass checks every length against the remaining bytes, the second copies.
func (r *ggufReader) stringArray(n int) ([]string, error) {
	start := r.pos
	var total uint64
	for range n {
		b, err := r.strBytes(math.MaxUint64, "string")
		if err != nil {
			return nil, err
		}
		total += uint64(len(b))
	}
	r.pos = start
	var sb strings.Builder
	sb.Grow(int(total))
	for range n {
		b, _ := r.strBytes(math.MaxUint64, "string") // checked above
		sb.Write(b)
	}
	all := sb.String()
	r.pos = start
	out := make([]string, n)
	off := 0
	for i := range out {
		b, _ := r.strBytes(math.MaxUint64, "string")
		out[i] = all[off : off+len(b)]
		off += len(b)
	}
	return out, nil
}

// ggufDecodeScalars decodes n little-endian values of a fixed-size type
// from b into a typed slice.
func ggufDecodeScalars(elem uint32, b []byte, n int) any {
	le := binary.LittleEndian
	switch elem {
	case ggufTypeUint8:
		return slices.Clone(b[:n:n])
	case ggufTypeInt8:
		out := make([]int8, n)
		for i := range out {
			out[i] = int8(b[i])
		}
		return out
	case ggufTypeBool:
		out := make([]bool, n)
		for i := range out {
			out[i] = b[i] != 0
		}
		return out
	case ggufTypeUint16:
		out := make([]uint16, n)
		for i := range out {
			out[i] = le.Uint16(b[2*i:])
		}
		return out
	case ggufTypeInt16:
		out := make([]int16, n)
		for i := range out {
			out[i] = int16(le.Uint16(b[2*i:]))
		}
		return out
	case ggufTypeUint32:
		out := make([]uint32, n)
		for i := range out {
			out[i] = le.Uint32(b[4*i:])
		}
		return out
	case ggufTypeInt32:
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(le.Uint32(b[4*i:]))
		}
		return out
	case ggufTypeFloat32:
		out := make([]float32, n)
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
		return out
	case ggufTypeUint64:
		out := make([]uint64, n)
		for i := range out {
			out[i] = le.Uint64(b[8*i:])
		}
		return out
	case ggufTypeInt64:
		out := make([]int64, n)
		for i := range out {
			out[i] = int64(le.Uint64(b[8*i:]))
		}
		return out
	case ggufTypeFloat64:
		out := make([]float64, n)
		for i := range out {
			out[i] = math.Float64frombits(le.Uint64(b[8*i:]))
		}
		return out
	}
	return nil
}

// tensorInfo decodes and validates one tensor info.
func (r *ggufReader) tensorInfo(alignment int) (TensorInfo, error) {
	at := r.pos
	name, err := r.str(ggufMaxTensorName, "tensor name")
	if err != nil {
		return TensorInfo{}, err
	}
	if name == "" {
		return TensorInfo{}, r.fail(at, "empty tensor name")
	}
	nAt := r.pos
	nDims, err := r.u32("tensor n_dims")
	if err != nil {
		return TensorInfo{}, err
	}
	if nDims == 0 || nDims > ggufMaxDims {
		return TensorInfo{}, r.fail(nAt, fmt.Sprintf("tensor %q has %d dimensions (want 1 to %d)", name, nDims, ggufMaxDims))
	}
	dims := make([]uint64, nDims)
	elems := uint64(1)
	for i := range dims {
		dAt := r.pos
		if dims[i], err = r.u64("tensor dimension"); err != nil {
			return TensorInfo{}, err
		}
		if dims[i] == 0 || dims[i] > math.MaxInt64 {
			return TensorInfo{}, r.fail(dAt, fmt.Sprintf("tensor %q dimension %d is %d", name, i, dims[i]))
		}
		var hi uint64
		hi, elems = bits.Mul64(elems, dims[i])
		if hi != 0 || elems > math.MaxInt64 {
			return TensorInfo{}, r.fail(dAt, fmt.Sprintf("tensor %q dimensions %v overflow", name, dims[:i+1]))
		}
	}
	tAt := r.pos
	typ, err := r.u32("tensor type")
	if err != nil {
		return TensorInfo{}, err
	}
	tt := TensorType(typ)
	if !tt.Supported() {
		return TensorInfo{}, &UnsupportedTypeError{Tensor: name, Type: typ}
	}
	blk := uint64(tt.BlockSize())
	if dims[0]%blk != 0 {
		return TensorInfo{}, r.fail(tAt, fmt.Sprintf("tensor %q row length %d is not a multiple of the %s block size %d", name, dims[0], tt, blk))
	}
	// elems <= MaxInt64 and bytes per block <= 4·block, so this cannot
	// overflow; check anyway.
	hi, size := bits.Mul64(elems/blk, uint64(tt.BlockBytes()))
	if hi != 0 {
		return TensorInfo{}, r.fail(tAt, fmt.Sprintf("tensor %q size overflows", name))
	}
	oAt := r.pos
	off, err := r.u64("tensor offset")
	if err != nil {
		return TensorInfo{}, err
	}
	if off%uint64(alignment) != 0 {
		return TensorInfo{}, r.fail(oAt, fmt.Sprintf("tensor %q offset %d is not a multiple of the alignment %d", name, off, alignment))
	}
	return TensorInfo{Name: name, Dims: dims, Type: tt, Offset: off, Size: size}, nil
}
