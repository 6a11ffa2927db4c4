package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// The Ollama store (ollama's manifest/paths.go and types/model/name.go):
//
//	<root>/manifests/<host>/<namespace>/<model>/<tag>   JSON manifest
//	<root>/blobs/sha256-<64 hex>                         layers, by digest
//
// Manifests and names are untrusted: CVE-2024-37032 ("Probllama") was a
// digest with "../" in it joined into a blob path. So every name part and
// digest is matched against a strict pattern before it is joined into a
// path, and all files are opened through an os.Root, which refuses paths
// (".." or symbolic links) that lead outside the store.
const (
	ollamaDefaultHost      = "registry.ollama.ai"
	ollamaDefaultNamespace = "library"
	ollamaDefaultTag       = "latest"

	// ollamaMaxManifestBytes bounds a manifest; real ones are under 2 KiB.
	ollamaMaxManifestBytes = 1 << 20

	ollamaMediaModel        = "application/vnd.ollama.image.model"
	ollamaMediaTemplate     = "application/vnd.ollama.image.template"
	ollamaMediaManifestList = "application/vnd.ollama.manifest.list.v2+json"
)

var (
	// ollamaDigestPattern is the only digest form accepted (lowercase hex,
	// as Ollama writes it).
	ollamaDigestPattern = regexp.MustCompile(`^sha256[:-][0-9a-f]{64}$`)
	// Name parts: a letter or digit first, then letters, digits, '_', '-'
	// and (except in namespaces) '.'; ".." is rejected separately.
	ollamaHostPattern      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)
	ollamaNamespacePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)
	ollamaModelPattern     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	ollamaTagPattern       = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)
)

// ollamaName is a parsed Ollama model name with defaults filled in.
type ollamaName struct {
	host, namespace, model, tag string
}

// parseOllamaName parses [host/][namespace/]model[:tag].
func parseOllamaName(s string) (ollamaName, error) {
	n := ollamaName{host: ollamaDefaultHost, namespace: ollamaDefaultNamespace, tag: ollamaDefaultTag}
	if s == "" || len(s) > 512 {
		return n, errors.New("a name must be 1 to 512 bytes")
	}
	rest := s
	if i := strings.LastIndexByte(s, ':'); i >= 0 && i > strings.LastIndexByte(s, '/') {
		rest, n.tag = s[:i], s[i+1:]
	}
	parts := strings.Split(rest, "/")
	switch len(parts) {
	case 1:
		n.model = parts[0]
	case 2:
		n.namespace, n.model = parts[0], parts[1]
	case 3:
		n.host, n.namespace, n.model = parts[0], parts[1], parts[2]
	default:
		return n, errors.New("a name has at most three parts: host/namespace/model")
	}
	for _, p := range []struct {
		what, value string
		pattern     *regexp.Regexp
	}{
		{"host", n.host, ollamaHostPattern},
		{"namespace", n.namespace, ollamaNamespacePattern},
		{"model", n.model, ollamaModelPattern},
		{"tag", n.tag, ollamaTagPattern},
	} {
		if !p.pattern.MatchString(p.value) || strings.Contains(p.value, "..") {
			return n, fmt.Errorf("invalid %s %q", p.what, p.value)
		}
	}
	return n, nil
}

// String is the shortest form of the name, with the tag: "llama3.2:1b",
// "user/model:latest", "hf.co/org/model:Q4_K_M".
func (n ollamaName) String() string {
	switch {
	case n.host != ollamaDefaultHost:
		return n.host + "/" + n.namespace + "/" + n.model + ":" + n.tag
	case n.namespace != ollamaDefaultNamespace:
		return n.namespace + "/" + n.model + ":" + n.tag
	}
	return n.model + ":" + n.tag
}

// manifestPath is the manifest's path relative to the store root.
func (n ollamaName) manifestPath() string {
	return filepath.Join("manifests", n.host, n.namespace, n.model, n.tag)
}

func (n ollamaName) lower() ollamaName {
	return ollamaName{strings.ToLower(n.host), strings.ToLower(n.namespace), strings.ToLower(n.model), strings.ToLower(n.tag)}
}

// ollamaManifest is the part of an Ollama (Docker v2) manifest llmd reads.
type ollamaManifest struct {
	SchemaVersion int           `json:"schemaVersion"`
	MediaType     string        `json:"mediaType"`
	Layers        []ollamaLayer `json:"layers"`
}

type ollamaLayer struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

// ollamaBlobPath validates digest and returns its blob's path relative to
// the store root.
func ollamaBlobPath(digest string) (string, bool) {
	if !ollamaDigestPattern.MatchString(digest) {
		return "", false
	}
	return filepath.Join("blobs", "sha256-"+digest[len("sha256:"):]), true
}

// ollamaQuote quotes an untrusted string for an error message, cut short.
func ollamaQuote(s string) string {
	if len(s) > 100 {
		s = s[:100] + "..."
	}
	return fmt.Sprintf("%q", s)
}

// resolveOllama resolves name in the Ollama store; spec is the full
// --model value, for messages.
func resolveOllama(spec, name string, env ResolveEnv) (ModelRef, error) {
	n, err := parseOllamaName(name)
	if err != nil {
		return ModelRef{}, resolveErr(spec, ErrInvalidModelRef, err,
			"is not a valid Ollama model name: %v (want [host/][namespace/]model[:tag])", err)
	}
	rootDir := env.OllamaModels
	if rootDir == "" {
		if env.Home == "" {
			return ModelRef{}, resolveErr(spec, ErrModelNotFound, nil,
				"not found: no Ollama store, since neither OLLAMA_MODELS nor HOME is set")
		}
		rootDir = filepath.Join(env.Home, ".ollama", "models")
	}
	rootDir, err = filepath.Abs(rootDir)
	if err != nil {
		return ModelRef{}, resolveErr(spec, ErrInvalidModelRef, err, "cannot be resolved: %v", err)
	}
	pull := fmt.Sprintf("pull it with \"ollama pull %s\"", name)
	root, err := os.OpenRoot(rootDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return ModelRef{}, resolveErr(spec, ErrModelNotFound, err, "not found: there is no Ollama store at %s: %s", rootDir, pull)
		}
		return ModelRef{}, resolveErr(spec, ErrInvalidModelRef, err, "cannot be resolved: the Ollama store %s: %v", rootDir, err)
	}
	defer root.Close()

	data, err := ollamaReadManifest(root, n)
	if errors.Is(err, fs.ErrNotExist) {
		return ModelRef{}, resolveErr(spec, ErrModelNotFound, err, "not found in %s: %s", rootDir, pull)
	}
	if err != nil {
		return ModelRef{}, resolveErr(spec, ErrInvalidModelRef, err, "has an unusable manifest in %s: %v", rootDir, err)
	}
	var m ollamaManifest
	if err := json.Unmarshal(data, &m); err != nil {
		return ModelRef{}, resolveErr(spec, ErrInvalidModelRef, err, "has a malformed manifest in %s: %v", rootDir, err)
	}
	if m.MediaType == ollamaMediaManifestList {
		return ModelRef{}, resolveErr(spec, ErrInvalidModelRef, nil,
			"is a manifest list, which llmd cannot load: pass its GGUF file instead")
	}

	ref := ModelRef{Name: n.String(), Source: RefSourceOllama}
	for _, l := range m.Layers {
		switch l.MediaType {
		case ollamaMediaModel:
			if ref.Path != "" {
				continue // the first model layer is the model; later ones are not used
			}
			path, err := ollamaBlob(root, rootDir, l.Digest, l.Size)
			if err != nil {
				return ModelRef{}, &ResolveError{Spec: spec, Reason: "has an unusable model layer: " + err.Error(), Err: err}
			}
			ref.Path = path
		case ollamaMediaTemplate:
			path, err := ollamaBlob(root, rootDir, l.Digest, l.Size)
			switch {
			case errors.Is(err, ErrInvalidModelRef):
				return ModelRef{}, &ResolveError{Spec: spec, Reason: "has an unusable template layer: " + err.Error(), Err: err}
			case err == nil:
				ref.TemplatePath = path
			}
		}
	}
	if ref.Path == "" {
		return ModelRef{}, resolveErr(spec, ErrInvalidModelRef, nil,
			"has no model layer (%s) in its manifest: it is not a GGUF model", ollamaMediaModel)
	}
	return ref, nil
}

// ollamaReadManifest reads n's manifest from root, trying the name as
// written and then in lower case. A missing manifest is fs.ErrNotExist.
func ollamaReadManifest(root *os.Root, n ollamaName) ([]byte, error) {
	f, err := root.Open(n.manifestPath())
	if errors.Is(err, fs.ErrNotExist) && n.lower() != n {
		f, err = root.Open(n.lower().manifestPath())
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, errors.New("the manifest is not a regular file")
	}
	data, err := io.ReadAll(io.LimitReader(f, ollamaMaxManifestBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > ollamaMaxManifestBytes {
		return nil, fmt.Errorf("the manifest is larger than %d bytes", ollamaMaxManifestBytes)
	}
	return data, nil
}

// ollamaBlobError is a problem with a layer's blob; Unwrap gives
// ErrInvalidModelRef or ErrModelNotFound.
type ollamaBlobError struct {
	kind error
	msg  string
}

func (e *ollamaBlobError) Error() string { return e.msg }
func (e *ollamaBlobError) Unwrap() error { return e.kind }

// ollamaBlob validates digest and checks that its blob is a regular file in
// the store, of the size the manifest gives (when it gives one); it returns
// the blob's path.
func ollamaBlob(root *os.Root, rootDir, digest string, size int64) (string, error) {
	rel, ok := ollamaBlobPath(digest)
	if !ok {
		return "", &ollamaBlobError{ErrInvalidModelRef, fmt.Sprintf("digest %s is not sha256 and 64 lowercase hex digits", ollamaQuote(digest))}
	}
	info, err := root.Stat(rel) // follows a symbolic link only inside the store
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", &ollamaBlobError{ErrModelNotFound, fmt.Sprintf("blob %s is missing: pull the model again", rel)}
	case err != nil:
		return "", &ollamaBlobError{ErrInvalidModelRef, fmt.Sprintf("blob %s cannot be used: %v", rel, err)}
	case !info.Mode().IsRegular():
		return "", &ollamaBlobError{ErrInvalidModelRef, fmt.Sprintf("blob %s is not a regular file", rel)}
	case size > 0 && info.Size() != size:
		return "", &ollamaBlobError{ErrInvalidModelRef,
			fmt.Sprintf("blob %s is %d bytes where the manifest says %d: pull the model again", rel, info.Size(), size)}
	}
	return filepath.Join(rootDir, rel), nil
}
