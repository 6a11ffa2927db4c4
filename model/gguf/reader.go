package gguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strings"
)

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
