//go:build unix

package gguf

import (
	"os"
	"syscall"
)

// ggufMap maps size bytes of fh read-only and returns the mapping and the
// function that releases it.
func ggufMap(fh *os.File, size int) ([]byte, func([]byte) error, error) {
	data, err := syscall.Mmap(int(fh.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return data, syscall.Munmap, nil
}
