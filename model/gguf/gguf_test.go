package gguf_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/model"
	"github.com/llmd/llmd/model/gguf"
	"github.com/llmd/llmd/model/synth"
)

var ggufUpdateCorpus = flag.Bool("gguf.update-corpus", false, "rewrite testdata/fuzz/FuzzParse from the seeds in gguf_test.go")

// ggufTestEnc builds GGUF bytes field by field, valid or not, for the
// hostile corpus.
type ggufTestEnc struct{ b []byte }

func ggufTestHeader(version uint32, nTensors, nKV uint64) *ggufTestEnc {
	e := &ggufTestEnc{}
	return e.u32(gguf.Magic).u32(version).u64(nTensors).u64(nKV)
}

func (e *ggufTestEnc) u8(v uint8) *ggufTestEnc { e.b = append(e.b, v); return e }
func (e *ggufTestEnc) u32(v uint32) *ggufTestEnc {
	e.b = binary.LittleEndian.AppendUint32(e.b, v)
	return e
}
func (e *ggufTestEnc) u64(v uint64) *ggufTestEnc {
	e.b = binary.LittleEndian.AppendUint64(e.b, v)
	return e
}
func (e *ggufTestEnc) str(s string) *ggufTestEnc { return e.u64(uint64(len(s))).raw([]byte(s)) }
func (e *ggufTestEnc) raw(b []byte) *ggufTestEnc { e.b = append(e.b, b...); return e }

// kvU32 appends a uint32 key/value pair.
func (e *ggufTestEnc) kvU32(key string, v uint32) *ggufTestEnc {
	return e.str(key).u32(gguf.ValueTypeUint32).u32(v)
}

// tensor appends a tensor info.
func (e *ggufTestEnc) tensor(name string, dims []uint64, typ uint32, off uint64) *ggufTestEnc {
	e.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		e.u64(d)
	}
	return e.u32(typ).u64(off)
}

// pad appends zeros up to a multiple of 32 bytes.
func (e *ggufTestEnc) pad() *ggufTestEnc {
	return e.raw(make([]byte, (32-len(e.b)%32)%32))
}

func (e *ggufTestEnc) bytes() []byte { return e.b }

// ggufHostileCase is a malformed file and the error it must produce.
type ggufHostileCase struct {
	data []byte
	// want is "magic", "format", "eof" (a FormatError wrapping
	// io.ErrUnexpectedEOF) or "type".
	want string
	// contains is a substring of the error text, when set.
	contains string
}

func ggufHostileCases(t testing.TB) map[string]ggufHostileCase {
	h := ggufTestHeader
	const max64 = math.MaxUint64
	valid := ggufTestModelBytes(t)
	long := string(bytes.Repeat([]byte("x"), gguf.MaxTensorName+1))
	// oneTensor is a file with one tensor info and dataBytes of data.
	oneTensor := func(dims []uint64, typ uint32, off uint64, dataBytes int) []byte {
		e := h(3, 1, 0).tensor("w", dims, typ, off).pad()
		return e.raw(make([]byte, dataBytes)).bytes()
	}
	return map[string]ggufHostileCase{
		"empty":                  {nil, "magic", ""},
		"bad magic":              {[]byte("GGML\x03\x00\x00\x00"), "magic", ""},
		"three bytes":            {[]byte("GGU"), "magic", ""},
		"magic only":             {[]byte("GGUF"), "eof", "version"},
		"truncated header":       {h(3, 0, 0).bytes()[:20], "eof", "key/value count"},
		"version 1":              {h(1, 0, 0).bytes(), "format", "version 1"},
		"version 4":              {h(4, 0, 0).bytes(), "format", "version 4"},
		"big-endian":             {h(0x03000000, 0, 0).bytes(), "format", "big-endian"},
		"tensor count 2^64-1":    {h(3, max64, 0).bytes(), "eof", "tensor count"},
		"kv count 2^64-1":        {h(3, 0, max64).bytes(), "eof", "key/value count"},
		"kv count wraps":         {h(3, 0, max64/gguf.MinKVBytes+1).bytes(), "eof", "key/value count"},
		"tensor count wraps":     {h(3, max64/gguf.MinTensorInfoBytes+1, 0).bytes(), "eof", "tensor count"},
		"kv count past end":      {h(3, 0, 2).kvU32("a", 1).bytes(), "eof", "key/value count"},
		"key length 2^64-1":      {h(3, 0, 1).u64(max64).raw(make([]byte, 16)).bytes(), "format", "key length"},
		"key length past end":    {h(3, 0, 1).u64(100).raw([]byte("abcdefgh1234")).bytes(), "eof", "key length 100"},
		"empty key":              {h(3, 0, 1).str("").u32(gguf.ValueTypeUint8).u8(1).bytes(), "format", "empty metadata key"},
		"duplicate key":          {h(3, 0, 2).kvU32("a", 1).kvU32("a", 2).bytes(), "format", "duplicate metadata key"},
		"string length 2^63":     {h(3, 0, 1).str("k").u32(gguf.ValueTypeString).u64(1 << 63).raw(make([]byte, 8)).bytes(), "eof", "string length"},
		"string past end":        {h(3, 0, 1).str("k").u32(gguf.ValueTypeString).u64(9).raw([]byte("12345678")).bytes(), "eof", "string length 9"},
		"unknown value type":     {h(3, 0, 1).str("k").u32(13).u64(0).bytes(), "format", "unknown metadata value type 13"},
		"value truncated":        {h(3, 0, 1).str("k").u32(gguf.ValueTypeUint64).u32(0).bytes(), "eof", "uint64"},
		"array count 2^64-1":     {h(3, 0, 1).str("k").u32(gguf.ValueTypeArray).u32(gguf.ValueTypeUint8).u64(max64).raw(make([]byte, 8)).bytes(), "eof", "array length"},
		"array count wraps":      {h(3, 0, 1).str("k").u32(gguf.ValueTypeArray).u32(gguf.ValueTypeUint32).u64(1 << 62).raw(make([]byte, 8)).bytes(), "eof", "array length"},
		"string array wraps":     {h(3, 0, 1).str("k").u32(gguf.ValueTypeArray).u32(gguf.ValueTypeString).u64(1 << 61).raw(make([]byte, 8)).bytes(), "eof", "array length"},
		"string in array past":   {h(3, 0, 1).str("k").u32(gguf.ValueTypeArray).u32(gguf.ValueTypeString).u64(2).str("ab").u64(50).raw(make([]byte, 8)).bytes(), "eof", "string length 50"},
		"array of arrays wraps":  {h(3, 0, 1).str("k").u32(gguf.ValueTypeArray).u32(gguf.ValueTypeArray).u64(max64/12 + 1).raw(make([]byte, 24)).bytes(), "eof", "array length"},
		"arrays nested 3 deep":   {h(3, 0, 1).str("k").u32(gguf.ValueTypeArray).u32(gguf.ValueTypeArray).u64(1).u32(gguf.ValueTypeArray).u64(1).u32(gguf.ValueTypeUint8).u64(1).u8(0).bytes(), "format", "nested deeper"},
		"unknown array elem":     {h(3, 0, 1).str("k").u32(gguf.ValueTypeArray).u32(77).u64(1).u8(0).bytes(), "format", "unknown array element type 77"},
		"alignment 0":            {h(3, 0, 1).kvU32("general.alignment", 0).bytes(), "format", "general.alignment"},
		"alignment 48":           {h(3, 0, 1).kvU32("general.alignment", 48).bytes(), "format", "not a power of two"},
		"alignment a string":     {h(3, 0, 1).str("general.alignment").u32(gguf.ValueTypeString).str("32").bytes(), "format", "general.alignment"},
		"alignment 2^31":         {h(3, 0, 1).kvU32("general.alignment", 1<<31).bytes(), "format", "general.alignment"},
		"n_dims 5":               {h(3, 1, 0).tensor("w", []uint64{32, 1, 1, 1, 1}, 0, 0).pad().bytes(), "format", "5 dimensions"},
		"n_dims 0":               {h(3, 1, 0).tensor("w", nil, 0, 0).raw(make([]byte, 8)).pad().bytes(), "format", "0 dimensions"},
		"dims product overflows": {h(3, 1, 0).tensor("w", []uint64{1 << 32, 1 << 32, 2}, 0, 0).pad().bytes(), "format", "overflow"},
		"dims 2^63 each":         {h(3, 1, 0).tensor("w", []uint64{1 << 63, 2}, 0, 0).pad().bytes(), "format", "dimension 0"},
		"dim zero":               {h(3, 1, 0).tensor("w", []uint64{32, 0}, 0, 0).pad().bytes(), "format", "dimension 1 is 0"},
		"unsupported Q4_1":       {oneTensor([]uint64{32}, 3, 0, 20), "type", `"w" has type Q4_1 (3)`},
		"unknown type 99":        {oneTensor([]uint64{32}, 99, 0, 128), "type", "type(99)"},
		"row not whole blocks":   {oneTensor([]uint64{33}, uint32(gguf.TypeQ8_0), 0, 68), "format", "not a multiple of the Q8_0 block size"},
		"offset unaligned":       {oneTensor([]uint64{16}, 0, 4, 128), "format", "not a multiple of the alignment"},
		"offset+size past end":   {oneTensor([]uint64{64}, 0, 0, 255), "eof", "past the end"},
		"offset past end":        {oneTensor([]uint64{8}, 0, 1<<40, 32), "eof", "past the end"},
		"offset+size wraps":      {oneTensor([]uint64{8}, 0, max64-31, 32), "eof", "past the end"},
		"size past end, huge":    {oneTensor([]uint64{1 << 40, 1 << 20}, 0, 0, 32), "eof", "past the end"},
		"tensor name too long":   {h(3, 1, 0).tensor(long, []uint64{8}, 0, 0).pad().raw(make([]byte, 32)).bytes(), "format", "tensor name length 65"},
		"empty tensor name":      {h(3, 1, 0).tensor("", []uint64{8}, 0, 0).pad().raw(make([]byte, 32)).bytes(), "format", "empty tensor name"},
		"duplicate tensor":       {h(3, 2, 0).tensor("w", []uint64{8}, 0, 0).tensor("w", []uint64{8}, 0, 32).pad().raw(make([]byte, 64)).bytes(), "format", "duplicate tensor"},
		"no padding before data": {h(3, 1, 0).tensor("w", []uint64{8}, 0, 0).bytes(), "eof", "padding"},
		"truncated data":         {valid[:len(valid)-64], "eof", "past the end"},
		"truncated metadata":     {valid[:60], "eof", ""},
		"truncated tensor info":  {h(3, 1, 0).str("wwwwwwwwwwwwwwwwwwww").u32(4).u64(32).u64(1).bytes(), "eof", "tensor dimension"},
	}
}

// ggufTestModelBytes returns a small valid model written by Writer.
func ggufTestModelBytes(t testing.TB) []byte {
	w, err := synth.Model{Arch: "qwen2", Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, FFN: 64, Vocab: 8, Type: gguf.TypeQ8_0, Tied: true}.Writer()
	require.NoError(t, err)
	w.SetStrings("tokenizer.ggml.tokens", []string{"a", "b", "c", "d", "e", "f", "g", "h"})
	var buf bytes.Buffer
	_, err = w.WriteTo(&buf)
	require.NoError(t, err)
	return buf.Bytes()
}

func TestGGUFHostileCorpus(t *testing.T) {
	for name, c := range ggufHostileCases(t) {
		t.Run(name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			f, err := gguf.Parse(c.data)
			runtime.ReadMemStats(&after)
			require.Error(t, err)
			require.Nil(t, f)
			switch c.want {
			case "magic":
				require.ErrorIs(t, err, gguf.ErrNotGGUF)
			case "format", "eof":
				var fe *gguf.FormatError
				require.ErrorAs(t, err, &fe, "%v", err)
				require.GreaterOrEqual(t, fe.Offset, int64(0))
				require.LessOrEqual(t, fe.Offset, int64(len(c.data)))
				require.Equal(t, c.want == "eof", errors.Is(err, io.ErrUnexpectedEOF), "%v", err)
			case "type":
				var ue *gguf.UnsupportedTypeError
				require.ErrorAs(t, err, &ue)
				require.Equal(t, "w", ue.Tensor)
			}
			require.Contains(t, err.Error(), c.contains)
			require.Regexp(t, "^gguf: ", err.Error())
			// Nothing is allocated in proportion to what the file claims.
			alloc := after.TotalAlloc - before.TotalAlloc
			require.LessOrEqual(t, alloc, uint64(16<<10+16*len(c.data)), "allocated %d bytes for a %d-byte file", alloc, len(c.data))
		})
	}
}

// TestGGUFEveryTruncationFails cuts a valid file at every byte before the
// end of its tensor data: each prefix is refused with an error.
func TestGGUFEveryTruncationFails(t *testing.T) {
	data := ggufTestModelBytes(t)
	f, err := gguf.Parse(data)
	require.NoError(t, err)
	last := f.Tensors[len(f.Tensors)-1]
	end := int(f.DataOffset) + int(last.Offset+last.Size)
	for n := range end {
		_, err := gguf.Parse(data[:n])
		require.Error(t, err, "prefix of %d bytes", n)
		if n >= 4 {
			var fe *gguf.FormatError
			require.ErrorAs(t, err, &fe, "prefix of %d bytes", n)
		}
	}
	_, err = gguf.Parse(data[:end])
	require.NoError(t, err)
}

func TestGGUFMetadataRoundTrip(t *testing.T) {
	values := map[string]any{
		"u8": uint8(200), "i8": int8(-100), "u16": uint16(60000), "i16": int16(-30000),
		"u32": uint32(4e9), "i32": int32(-2e9), "f32": float32(1.5), "bool": true, "bool.false": false,
		"str": "héllo", "empty": "", "u64": uint64(math.MaxUint64), "i64": int64(math.MinInt64), "f64": math.Pi,
		"a.u8": []uint8{1, 2}, "a.i8": []int8{-1}, "a.u16": []uint16{3}, "a.i16": []int16{-4},
		"a.u32": []uint32{5}, "a.i32": []int32{-6, 7}, "a.f32": []float32{0.5, -0.25}, "a.bool": []bool{true, false},
		"a.str": []string{"x", "", "yz"}, "a.u64": []uint64{8}, "a.i64": []int64{-9}, "a.f64": []float64{1e300},
		"a.empty":  []string{},
		"a.nested": []any{[]int32{1, 2}, []string{"p", "q"}, []uint8{}},
	}
	w := gguf.NewWriter()
	for k, v := range values {
		require.NoError(t, w.Set(k, v))
	}
	var buf bytes.Buffer
	n, err := w.WriteTo(&buf)
	require.NoError(t, err)
	require.Equal(t, int64(buf.Len()), n)

	for _, version := range []uint32{3, 2} {
		data := bytes.Clone(buf.Bytes())
		binary.LittleEndian.PutUint32(data[4:], version)
		f, err := gguf.Parse(data)
		require.NoError(t, err)
		require.Equal(t, version, f.Version)
		require.Equal(t, 32, f.Alignment)
		require.Len(t, f.Keys(), len(values))
		require.IsNonDecreasing(t, f.Keys())
		for k, want := range values {
			got, ok := f.Value(k)
			require.True(t, ok, k)
			require.Equal(t, want, got, k)
		}
	}

	f, err := gguf.Parse(buf.Bytes())
	require.NoError(t, err)
	var md gguf.Metadata = f
	u, ok := md.Uint("u8")
	require.True(t, ok)
	require.Equal(t, uint64(200), u)
	_, ok = md.Uint("i8")
	require.False(t, ok, "negative")
	i, ok := md.Int("i32")
	require.True(t, ok)
	require.Equal(t, int64(-2e9), i)
	_, ok = md.Int("u64")
	require.False(t, ok, "beyond int64")
	u, ok = md.Uint("u64")
	require.True(t, ok)
	require.Equal(t, uint64(math.MaxUint64), u)
	fl, ok := md.Float("f32")
	require.True(t, ok)
	require.Equal(t, 1.5, fl)
	_, ok = md.Float("u32")
	require.False(t, ok)
	s, ok := md.String("str")
	require.True(t, ok)
	require.Equal(t, "héllo", s)
	_, ok = md.String("missing")
	require.False(t, ok)
	b, ok := md.Bool("bool")
	require.True(t, ok && b)
	ss, ok := md.Strings("a.str")
	require.True(t, ok)
	require.Equal(t, []string{"x", "", "yz"}, ss)
	fs, ok := md.Float32s("a.f32")
	require.True(t, ok)
	require.Equal(t, []float32{0.5, -0.25}, fs)
	is, ok := md.Int32s("a.i32")
	require.True(t, ok)
	require.Equal(t, []int32{-6, 7}, is)
	is, ok = md.Int32s("a.u8")
	require.True(t, ok, "converted")
	require.Equal(t, []int32{1, 2}, is)
	_, ok = md.Int32s("a.u64")
	require.True(t, ok)
	_, ok = md.Int32s("a.f32")
	require.False(t, ok)
}

func TestGGUFInt32sRefusesValuesThatDoNotFit(t *testing.T) {
	w := gguf.NewWriter()
	w.SetUint64("k", 0) // scalar, not an array
	require.NoError(t, w.Set("big", []uint64{1 << 40}))
	require.NoError(t, w.Set("neg", []int64{-1 << 40}))
	require.NoError(t, w.Set("huge", []uint64{math.MaxUint64}))
	var buf bytes.Buffer
	_, err := w.WriteTo(&buf)
	require.NoError(t, err)
	f, err := gguf.Parse(buf.Bytes())
	require.NoError(t, err)
	for _, k := range []string{"k", "big", "neg", "huge"} {
		_, ok := f.Int32s(k)
		require.False(t, ok, k)
	}
}

func TestGGUFAlignment(t *testing.T) {
	for _, align := range []int{8, 64, 4096} {
		w := gguf.NewWriter()
		require.NoError(t, w.SetAlignment(align))
		require.NoError(t, w.AddTensor("a", []uint64{3}, gguf.TypeF32, []float32{1, 2, 3}))
		require.NoError(t, w.AddTensor("b", []uint64{2}, gguf.TypeF32, []float32{4, 5}))
		var buf bytes.Buffer
		_, err := w.WriteTo(&buf)
		require.NoError(t, err)
		f, err := gguf.Parse(buf.Bytes())
		require.NoError(t, err)
		require.Equal(t, align, f.Alignment)
		require.Zero(t, f.DataOffset%int64(align))
		for _, ti := range f.Tensors {
			require.Zero(t, ti.Offset%uint64(align))
		}
		b, ok := f.Tensor("b")
		require.True(t, ok)
		out := make([]float32, 2)
		require.NoError(t, gguf.Dequantize(b.Type, f.TensorData(b), out))
		require.Equal(t, []float32{4, 5}, out)
	}
	require.Error(t, gguf.NewWriter().SetAlignment(48))
	require.Error(t, gguf.NewWriter().SetAlignment(0))
}

func TestGGUFOpenMapsFile(t *testing.T) {
	data := ggufTestModelBytes(t)
	path := filepath.Join(t.TempDir(), "m.gguf")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	f, err := gguf.Open(path)
	require.NoError(t, err)
	emb, ok := f.Tensor("token_embd.weight")
	require.True(t, ok)
	got := f.TensorData(emb)
	require.Len(t, got, int(emb.Size))
	require.Equal(t, int(emb.Size), cap(got), "capacity is clipped to the tensor")
	require.Equal(t, data[f.DataOffset+int64(emb.Offset):][:emb.Size], got)
	require.Nil(t, f.TensorData(gguf.TensorInfo{Offset: 1 << 40, Size: 1}), "outside the file")
	require.Nil(t, f.TensorData(gguf.TensorInfo{Offset: math.MaxUint64, Size: 2}), "wrapping")
	require.NoError(t, f.Close())
	require.NoError(t, f.Close(), "idempotent")
	require.Nil(t, f.TensorData(emb), "closed")
	_, ok = f.String("general.architecture")
	require.True(t, ok, "metadata outlives Close")

	// Errors name the path and keep their type.
	bad := filepath.Join(t.TempDir(), "bad.gguf")
	require.NoError(t, os.WriteFile(bad, data[:len(data)-100], 0o644))
	_, err = gguf.Open(bad)
	var fe *gguf.FormatError
	require.ErrorAs(t, err, &fe)
	require.Contains(t, err.Error(), bad)
	for _, small := range [][]byte{nil, []byte("GG"), []byte("GGUF\x03\x00"), []byte("notgguf!")} {
		require.NoError(t, os.WriteFile(bad, small, 0o644))
		_, err = gguf.Open(bad)
		require.Error(t, err)
	}
	require.NoError(t, os.WriteFile(bad, []byte("notgguf!"), 0o644))
	_, err = gguf.Open(bad)
	require.ErrorIs(t, err, gguf.ErrNotGGUF)
	_, err = gguf.Open(filepath.Join(t.TempDir(), "missing.gguf"))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = gguf.Open(t.TempDir())
	require.Error(t, err)
}

// ggufFuzzSeeds returns the seed inputs of FuzzParse: valid files from the
// writer and the hostile corpus.
func ggufFuzzSeeds(t testing.TB) map[string][]byte {
	seeds := map[string][]byte{"valid-model": ggufTestModelBytes(t)}
	w := gguf.NewWriter()
	w.SetString("general.architecture", "llama")
	_ = w.Set("nested", []any{[]int32{1}, []string{"a"}})
	for i, typ := range gguf.QuantAllTypes {
		n := typ.BlockSize() * 2
		_ = w.AddTensor(fmt.Sprintf("t%d", i), []uint64{uint64(n / 2), 2}, typ, make([]float32, n))
	}
	var buf bytes.Buffer
	_, _ = w.WriteTo(&buf)
	seeds["valid-all-types"] = buf.Bytes()
	for name, c := range ggufHostileCases(t) {
		seeds["hostile-"+name] = c.data
	}
	return seeds
}

// TestGGUFFuzzCorpus writes the seeds to testdata/fuzz/FuzzParse with
// -gguf.update-corpus, and otherwise checks that the directory exists.
func TestGGUFFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParse")
	if !*ggufUpdateCorpus {
		entries, err := os.ReadDir(dir)
		require.NoError(t, err, "run go test -run TestGGUFFuzzCorpus -gguf.update-corpus")
		require.NotEmpty(t, entries)
		return
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, data := range ggufFuzzSeeds(t) {
		file := ""
		for _, r := range name {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
				file += string(r)
			} else {
				file += "_"
			}
		}
		body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n"
		require.NoError(t, os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644))
	}
}

// FuzzParse checks that no input makes the reader, the spec or
// dequantization panic, and that what Parse accepts is consistent.
func FuzzParse(f *testing.F) {
	for _, data := range ggufFuzzSeeds(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := gguf.Parse(data)
		if err != nil {
			var fe *gguf.FormatError
			var ue *gguf.UnsupportedTypeError
			if !errors.Is(err, gguf.ErrNotGGUF) && !errors.As(err, &fe) && !errors.As(err, &ue) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		for _, k := range file.Keys() {
			file.Value(k)
			file.String(k)
			file.Uint(k)
			file.Int(k)
			file.Float(k)
			file.Bool(k)
			file.Strings(k)
			file.Float32s(k)
			file.Int32s(k)
		}
		for _, ti := range file.Tensors {
			b := file.TensorData(ti)
			if uint64(len(b)) != ti.Size {
				t.Fatalf("tensor %q: %d bytes, info says %d", ti.Name, len(b), ti.Size)
			}
			if n := ti.Elements(); n <= 1<<16 {
				if err := gguf.Dequantize(ti.Type, b, make([]float32, n)); err != nil {
					t.Fatalf("tensor %q: %v", ti.Name, err)
				}
			}
		}
		_, _ = model.SpecFromFile(file)
	})
}

// TestGGUFAllocationIsBoundedByFileSize parses files made of the smallest
// entries that allocate the most (empty strings, empty nested arrays, one
// byte keys): the heap grows by a small multiple of the file size.
func TestGGUFAllocationIsBoundedByFileSize(t *testing.T) {
	const n = 50000
	cases := map[string]*ggufTestEnc{
		"empty strings": ggufTestHeader(3, 0, 1).str("k").u32(gguf.ValueTypeArray).u32(gguf.ValueTypeString).u64(n).raw(make([]byte, 8*n)),
		"empty nested arrays": func() *ggufTestEnc {
			e := ggufTestHeader(3, 0, 1).str("k").u32(gguf.ValueTypeArray).u32(gguf.ValueTypeArray).u64(n)
			for range n {
				e.u32(gguf.ValueTypeUint8).u64(0)
			}
			return e
		}(),
		"many keys": func() *ggufTestEnc {
			e := ggufTestHeader(3, 0, n)
			for i := range n {
				e.str(strconv.Itoa(i)).u32(gguf.ValueTypeBool).u8(1)
			}
			return e
		}(),
		"many tensors": func() *ggufTestEnc {
			e := ggufTestHeader(3, n, 0)
			for i := range n {
				e.tensor(strconv.Itoa(i), []uint64{1}, uint32(gguf.TypeF32), 0)
			}
			return e.pad().raw(make([]byte, 32))
		}(),
	}
	for name, e := range cases {
		t.Run(name, func(t *testing.T) {
			data := e.bytes()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			f, err := gguf.Parse(data)
			runtime.ReadMemStats(&after)
			require.NoError(t, err)
			require.NotNil(t, f)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d-byte file: %d bytes allocated (%.1fx)", len(data), alloc, float64(alloc)/float64(len(data)))
			require.LessOrEqual(t, alloc, uint64(6*len(data)))
		})
	}
}
