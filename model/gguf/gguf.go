package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"slices"
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
