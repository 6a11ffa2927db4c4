// Package clicfg keeps llmctl's saved API keys: one key per llmd address,
// in a JSON file readable only by its owner (0600, in a 0700 directory), the
// way "gh auth login" keeps its tokens. llmctl uses the saved key of an
// address when no --api-key or $LLMD_API_KEY is given.
//
// The package reads and writes the one file it is given; it reads no
// environment variable (cmd/llmctl picks the path).
package clicfg

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// FileName is the name of the credentials file in llmctl's configuration
// directory.
const FileName = "credentials.json"

// ErrInvalidKey is returned by [File.Set] for a key that is empty or holds
// characters no HTTP header may carry.
var ErrInvalidKey = errors.New("clicfg: invalid API key")

// Entry is the key saved for one llmd address.
type Entry struct {
	// APIKey is the secret; it is never logged or printed by llmctl
	// except by "llmctl config token".
	APIKey string `json:"api_key"`
	// KeyID is the key's id as "llmctl keys list" shows it, when the key
	// has llmd's shape; "" otherwise.
	KeyID string `json:"key_id,omitempty"`
	// Admin says whether the key was saved as an admin key (as far as
	// llmctl knew when saving it).
	Admin bool `json:"admin,omitempty"`
	// Saved is when the key was saved.
	Saved time.Time `json:"saved"`
}

// String never shows the key.
func (e Entry) String() string {
	if e.KeyID != "" {
		return e.KeyID
	}
	return "(key)"
}

// File is the credentials file: the saved key of each address. The zero
// value is an empty file; Load reads one, Save writes it.
type File struct {
	// Hosts maps a normalized llmd base URL (http://127.0.0.1:8700) to
	// its key.
	Hosts map[string]Entry `json:"hosts"`
}

// Load reads the credentials file at path. A file that does not exist is
// an empty File, not an error.
func Load(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &File{Hosts: map[string]Entry{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read saved keys: %w", err)
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("read saved keys %s: %w (remove the file and log in again)", path, err)
	}
	if f.Hosts == nil {
		f.Hosts = map[string]Entry{}
	}
	return &f, nil
}

// Get returns the key saved for addr.
func (f *File) Get(addr string) (Entry, bool) {
	e, ok := f.Hosts[addr]
	return e, ok && e.APIKey != ""
}

// Set saves e for addr, replacing what was there. It returns ErrInvalidKey
// for a key with no characters or with spaces or control characters.
func (f *File) Set(addr string, e Entry) error {
	if !validKey(e.APIKey) {
		return ErrInvalidKey
	}
	if f.Hosts == nil {
		f.Hosts = map[string]Entry{}
	}
	f.Hosts[addr] = e
	return nil
}

// Delete forgets the key of addr and reports whether there was one.
func (f *File) Delete(addr string) bool {
	_, ok := f.Hosts[addr]
	delete(f.Hosts, addr)
	return ok
}

// Addrs returns the addresses that have a key, sorted.
func (f *File) Addrs() []string {
	out := make([]string, 0, len(f.Hosts))
	for a := range f.Hosts {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// Save writes f to path, readable and writable by its owner only: it
// creates the directory (0700) if needed and replaces the file atomically
// (a temporary file in the same directory, renamed), so a crash never
// leaves half a file.
func (f *File) Save(path string) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save keys: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".credentials-*")
	if err != nil {
		return fmt.Errorf("save keys: %w", err)
	}
	name := tmp.Name()
	defer os.Remove(name) // after a successful rename, there is nothing
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("save keys: %w", err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("save keys: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("save keys: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save keys: %w", err)
	}
	if err := os.Rename(name, path); err != nil {
		return fmt.Errorf("save keys: %w", err)
	}
	return nil
}

// validKey reports whether key can travel in an Authorization header.
func validKey(key string) bool {
	if key == "" || len(key) > 4096 {
		return false
	}
	return !strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r == 0x7f || r > 0x7e })
}
