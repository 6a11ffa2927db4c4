package gguf

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWriterRoundTripEveryType(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	type tensor struct {
		dims []uint64
		typ  TensorType
		data []float32
	}
	w := NewWriter()
	w.SetString("general.architecture", "llama")
	want := map[string]tensor{}
	for _, typ := range quantAllTypes {
		for _, dims := range [][]uint64{{512, 3}, {256, 2, 2, 1}, {256}} {
			n := int(dims[0] * (func() uint64 {
				p := uint64(1)
				for _, d := range dims[1:] {
					p *= d
				}
				return p
			}()))
			data := make([]float32, n)
			for i := range data {
				data[i] = float32(rng.NormFloat64() * 0.1)
			}
			name := typ.String() + "." + string(rune('a'+len(dims)))
			require.NoError(t, w.AddTensor(name, dims, typ, data))
			want[name] = tensor{dims, typ, data}
		}
	}
	path := filepath.Join(t.TempDir(), "all.gguf")
	require.NoError(t, w.WriteFile(path))

	f, err := Open(path)
	require.NoError(t, err)
	defer f.Close()
	require.Equal(t, uint32(3), f.Version)
	require.Len(t, f.Tensors, len(want))
	for name, w := range want {
		ti, ok := f.Tensor(name)
		require.True(t, ok, name)
		require.Equal(t, w.dims, ti.Dims, name)
		require.Equal(t, w.typ, ti.Type, name)
		rb, err := w.typ.RowBytes(len(w.data))
		require.NoError(t, err)
		require.Equal(t, uint64(rb), ti.Size)
		require.Zero(t, ti.Offset%32)
		out := make([]float32, len(w.data))
		require.NoError(t, Dequantize(ti.Type, f.TensorData(ti), out), name)
		quantRequireClose(t, w.typ, w.data, out)
		// Row by row gives the same values.
		row := int(ti.Dims[0])
		if len(out) >= 2*row {
			rowBytes, _ := ti.Type.RowBytes(row)
			got := make([]float32, row)
			require.NoError(t, Dequantize(ti.Type, f.TensorData(ti)[rowBytes:2*rowBytes], got))
			require.Equal(t, out[row:2*row], got)
		}
	}
}

func TestWriterAddTensorData(t *testing.T) {
	block := quantHandCases()["Q6_K"]
	w := NewWriter()
	require.NoError(t, w.AddTensorData("q", []uint64{256}, TypeQ6_K, block.block))
	require.Error(t, w.AddTensorData("short", []uint64{256}, TypeQ6_K, block.block[:209]))
	var buf bytes.Buffer
	_, err := w.WriteTo(&buf)
	require.Error(t, err, "the writer remembers the first error")

	w = NewWriter()
	require.NoError(t, w.AddTensorData("q", []uint64{256}, TypeQ6_K, block.block))
	buf.Reset()
	_, err = w.WriteTo(&buf)
	require.NoError(t, err)
	f, err := Parse(buf.Bytes())
	require.NoError(t, err)
	ti, _ := f.Tensor("q")
	require.Equal(t, block.block, f.TensorData(ti))
}

func TestWriterRefusesInvalidInput(t *testing.T) {
	cases := map[string]func(w *Writer) error{
		"empty key":         func(w *Writer) error { return w.Set("", uint32(1)) },
		"int value":         func(w *Writer) error { return w.Set("k", 1) },
		"nested 3 deep":     func(w *Writer) error { return w.Set("k", []any{[]any{[]int32{1}}}) },
		"array of scalars":  func(w *Writer) error { return w.Set("k", []any{int32(1)}) },
		"alignment type":    func(w *Writer) error { return w.Set("general.alignment", uint64(32)) },
		"alignment 24":      func(w *Writer) error { return w.SetAlignment(24) },
		"empty tensor name": func(w *Writer) error { return w.AddTensor("", []uint64{1}, TypeF32, []float32{1}) },
		"long tensor name": func(w *Writer) error {
			return w.AddTensor(string(make([]byte, 65)), []uint64{1}, TypeF32, []float32{1})
		},
		"no dims":          func(w *Writer) error { return w.AddTensor("t", nil, TypeF32, nil) },
		"five dims":        func(w *Writer) error { return w.AddTensor("t", []uint64{1, 1, 1, 1, 1}, TypeF32, []float32{1}) },
		"zero dim":         func(w *Writer) error { return w.AddTensor("t", []uint64{0}, TypeF32, nil) },
		"wrong length":     func(w *Writer) error { return w.AddTensor("t", []uint64{2}, TypeF32, []float32{1}) },
		"partial block":    func(w *Writer) error { return w.AddTensor("t", []uint64{16}, TypeQ8_0, make([]float32, 16)) },
		"unsupported type": func(w *Writer) error { return w.AddTensor("t", []uint64{32}, TensorType(3), make([]float32, 32)) },
		"overflowing dims": func(w *Writer) error { return w.AddTensor("t", []uint64{1 << 40, 1 << 40}, TypeF32, nil) },
		"duplicate tensor": func(w *Writer) error {
			_ = w.AddTensor("t", []uint64{1}, TypeF32, []float32{1})
			return w.AddTensor("t", []uint64{1}, TypeF32, []float32{1})
		},
	}
	for name, add := range cases {
		t.Run(name, func(t *testing.T) {
			w := NewWriter()
			err := add(w)
			require.Error(t, err)
			require.Regexp(t, "^gguf: ", err.Error())
			_, werr := w.WriteTo(&bytes.Buffer{})
			require.Equal(t, err, werr)
		})
	}
	w := NewWriter()
	w.SetString("", "x") // typed setters record the error for WriteTo
	_, err := w.WriteTo(&bytes.Buffer{})
	require.Error(t, err)
}

func TestWriterSetReplacesInPlace(t *testing.T) {
	w := NewWriter()
	w.SetString("a", "1")
	w.SetUint32("b", 2)
	w.SetString("a", "3")
	var buf bytes.Buffer
	_, err := w.WriteTo(&buf)
	require.NoError(t, err)
	f, err := Parse(buf.Bytes())
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, f.Keys())
	v, _ := f.String("a")
	require.Equal(t, "3", v)
}
