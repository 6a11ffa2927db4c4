package gguf

import (
	"math"
)

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

// ArrayLen returns the length of an array value, or -1 when key is absent
// or not an array.
func (f *File) ArrayLen(key string) int {
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
