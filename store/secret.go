package store

import (
	"fmt"
	"hash/crc32"
	"io"
	"math/big"
	"strings"
)

// The shape of a key's secret: "llmd-", the random part, the checksum.
const (
	secretPrefix = "llmd-"
	// secretBytes random bytes make the random part, written as
	// secretDigits base62 digits (62^43 > 2^256).
	secretBytes  = 32
	secretDigits = 43
	// checkDigits base62 digits hold the CRC-32 (62^6 > 2^32) of the
	// prefix and the random part.
	checkDigits = 6
	secretLen   = len(secretPrefix) + secretDigits + checkDigits
	// keyIDLen is the length of a key's ID: the secret's prefix and the
	// random part's first 7 digits (about 41 bits).
	keyIDLen = len(secretPrefix) + 7
)

// base62 is the digit set of big.Int.Text(62).
const base62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// newSecret returns a new secret made of secretBytes from r.
func newSecret(r io.Reader) (string, error) {
	var b [secretBytes]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", fmt.Errorf("read random bytes: %w", err)
	}
	digits := new(big.Int).SetBytes(b[:]).Text(62)
	buf := make([]byte, 0, secretLen)
	buf = append(buf, secretPrefix...)
	buf = append(buf, strings.Repeat("0", secretDigits-len(digits))...)
	buf = append(buf, digits...)
	buf = appendChecksum(buf, buf)
	return string(buf), nil
}

// appendChecksum appends to dst the checkDigits base62 digits of the CRC-32
// (IEEE) of b.
func appendChecksum(dst, b []byte) []byte {
	sum := crc32.ChecksumIEEE(b)
	var digits [checkDigits]byte
	for i := len(digits) - 1; i >= 0; i-- {
		digits[i] = base62[sum%62]
		sum /= 62
	}
	return append(dst, digits[:]...)
}

// wellFormed reports whether secret has the shape of a secret and a
// matching checksum, which rejects a mistyped key without a database read.
func wellFormed(secret string) bool {
	if len(secret) != secretLen || !hasBase62Tail(secret) {
		return false
	}
	n := secretLen - checkDigits
	var buf [secretLen]byte
	body := append(buf[:0], secret[:n]...)
	return string(appendChecksum(body, body)[n:]) == secret[n:]
}

// wellFormedID reports whether id has the shape of a key's ID.
func wellFormedID(id string) bool {
	return len(id) == keyIDLen && hasBase62Tail(id)
}

// hasBase62Tail reports whether s is secretPrefix followed by base62
// digits.
func hasBase62Tail(s string) bool {
	if !strings.HasPrefix(s, secretPrefix) {
		return false
	}
	for i := len(secretPrefix); i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}
