package store

import (
	"bytes"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSecretShape(t *testing.T) {
	t.Parallel()
	tests := map[string][]byte{
		"zero":   make([]byte, secretBytes),
		"max":    bytes.Repeat([]byte{0xff}, secretBytes),
		"random": nil,
	}
	for name, random := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := rand.Reader
			if random != nil {
				r = bytes.NewReader(random)
			}
			secret, err := newSecret(r)
			require.NoError(t, err)
			assert.Len(t, secret, 54)
			assert.True(t, strings.HasPrefix(secret, "llmd-"))
			assert.True(t, hasBase62Tail(secret))
			assert.True(t, wellFormed(secret))
			assert.True(t, wellFormedID(secret[:keyIDLen]))
		})
	}
	zero, err := newSecret(bytes.NewReader(make([]byte, secretBytes)))
	require.NoError(t, err)
	assert.Equal(t, "llmd-"+strings.Repeat("0", 43), zero[:48])
}

func TestSecretsDiffer(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		secret, err := newSecret(rand.Reader)
		require.NoError(t, err)
		require.False(t, seen[secret[:keyIDLen]], "ID %s twice", secret[:keyIDLen])
		seen[secret[:keyIDLen]] = true
	}
}

// TestChecksumCatchesTypos checks that every one-character substitution and
// every swap of neighbours is rejected by the checksum.
func TestChecksumCatchesTypos(t *testing.T) {
	t.Parallel()
	secret, err := newSecret(rand.Reader)
	require.NoError(t, err)
	for i := len(secretPrefix); i < len(secret); i++ {
		for _, c := range []byte(base62) {
			if c == secret[i] {
				continue
			}
			typo := []byte(secret)
			typo[i] = c
			require.False(t, wellFormed(string(typo)), "%q at %d", c, i)
		}
		if i+1 < len(secret) && secret[i] != secret[i+1] {
			typo := []byte(secret)
			typo[i], typo[i+1] = typo[i+1], typo[i]
			require.False(t, wellFormed(string(typo)), "swap at %d", i)
		}
	}
}

func TestNewSecretShortRead(t *testing.T) {
	t.Parallel()
	_, err := newSecret(bytes.NewReader(make([]byte, secretBytes-1)))
	require.Error(t, err)
}
