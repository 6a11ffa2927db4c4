package gguf

// Metadata is typed access to a model file's key/value metadata. A getter
// reports false when the key is absent or holds another type. Integer
// getters accept any integer type that fits; Float accepts float32 and
// float64. The caller must not modify returned slices.
//
// *File implements it; tests may use their own.
type Metadata interface {
	String(key string) (string, bool)
	Uint(key string) (uint64, bool)
	Int(key string) (int64, bool)
	Float(key string) (float64, bool)
	Bool(key string) (bool, bool)
	Strings(key string) ([]string, bool)
	// Float32s returns an array of float32 values.
	Float32s(key string) ([]float32, bool)
	// Int32s returns an array of int32 values (or other integers that fit).
	Int32s(key string) ([]int32, bool)
}
