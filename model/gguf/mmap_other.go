//go:build !unix

package gguf

import (
	"io"
	"os"
)

// ggufMap reads size bytes of fh into memory: the fallback where mmap is
// not available. The returned release function drops nothing; the garbage
// collector frees the copy.
func ggufMap(fh *os.File, size int) ([]byte, func([]byte) error, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(fh, data); err != nil {
		return nil, nil, err
	}
	return data, func([]byte) error { return nil }, nil
}
