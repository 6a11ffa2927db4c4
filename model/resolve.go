package model

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Sources of a [ModelRef].
const (
	RefSourceFile   = "file"
	RefSourceOllama = "ollama"
	RefSourceDir    = "dir"
)

// ollamaPrefix marks a --model value that names a model in the Ollama store.
const ollamaPrefix = "ollama:"

var (
	// ErrModelNotFound means the file, directory or Ollama model does not
	// exist (a *ResolveError wraps it).
	ErrModelNotFound = errors.New("model: model not found")
	// ErrInvalidModelRef means the --model value, or what it points to, is
	// malformed or unsafe to open: a bad name, a manifest that is not
	// JSON or too large, a digest that is not sha256 + 64 hex digits, a
	// path that leaves the store, or something other than a regular file
	// (a *ResolveError wraps it).
	ErrInvalidModelRef = errors.New("model: invalid model reference")
)

// ResolveError is the error of [Resolve] and [ResolveDir]. Its message says
// what to do about it.
type ResolveError struct {
	// Spec is the value being resolved: a path, a directory or
	// "ollama:NAME".
	Spec string
	// Reason completes "model SPEC ...", e.g. `not found in
	// /home/u/.ollama/models: pull it with "ollama pull llama3.2"`.
	Reason string
	// Err is ErrModelNotFound or ErrInvalidModelRef, possibly wrapping the
	// underlying error.
	Err error
}

func (e *ResolveError) Error() string {
	return "model " + strconv.Quote(e.Spec) + " " + e.Reason
}

func (e *ResolveError) Unwrap() error { return e.Err }

func resolveErr(spec string, kind error, cause error, format string, args ...any) *ResolveError {
	err := kind
	if cause != nil {
		err = fmt.Errorf("%w: %w", kind, cause)
	}
	return &ResolveError{Spec: spec, Reason: fmt.Sprintf(format, args...), Err: err}
}

// ModelRef is a model file to serve and the name to serve it under.
type ModelRef struct {
	// Name is the model id llmd serves the file under: "llama3.2:1b" for
	// an Ollama model (with its namespace or host when not the default),
	// or the file name without ".gguf".
	Name string
	// Path is the GGUF file.
	Path string
	// Source is RefSourceFile, RefSourceOllama or RefSourceDir.
	Source string
	// TemplatePath is the Ollama template layer's blob, if the model has
	// one. It is a Go text/template, recorded for reference only: llmd
	// renders the GGUF file's Jinja template.
	TemplatePath string
}

// ResolveEnv holds the environment Resolve needs; the caller reads it so
// that this package never calls os.Getenv.
type ResolveEnv struct {
	// OllamaModels is $OLLAMA_MODELS, the Ollama store; when empty the
	// store is Home/.ollama/models.
	OllamaModels string
	// Home is $HOME.
	Home string
}

// Resolve resolves one --model value:
//
//   - "ollama:NAME" with NAME = [host/][namespace/]model[:tag] is a model in
//     the Ollama store (defaults registry.ollama.ai, library, latest);
//   - a directory is resolved with [ResolveDir];
//   - anything else is the path of a GGUF file, served under its file name
//     without ".gguf".
//
// Errors are *ResolveError wrapping ErrModelNotFound or ErrInvalidModelRef.
func Resolve(spec string, env ResolveEnv) ([]ModelRef, error) {
	if name, ok := strings.CutPrefix(spec, ollamaPrefix); ok {
		ref, err := resolveOllama(spec, name, env)
		if err != nil {
			return nil, err
		}
		return []ModelRef{ref}, nil
	}
	if spec == "" {
		return nil, resolveErr(spec, ErrInvalidModelRef, nil, "is empty: pass a GGUF file, a directory or ollama:NAME")
	}
	info, err := os.Stat(spec)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		hint := ""
		if resolveLooksLikeOllamaName(spec) {
			hint = fmt.Sprintf(`; for a model in the Ollama store, pass "ollama:%s"`, spec)
		}
		return nil, resolveErr(spec, ErrModelNotFound, err, "not found: no such file%s", hint)
	case err != nil:
		return nil, resolveErr(spec, ErrModelNotFound, err, "cannot be read: %v", err)
	case info.IsDir():
		return ResolveDir(spec)
	case !info.Mode().IsRegular():
		return nil, resolveErr(spec, ErrInvalidModelRef, nil, "is not a regular file")
	}
	path, err := filepath.Abs(spec)
	if err != nil {
		return nil, resolveErr(spec, ErrInvalidModelRef, err, "has no absolute path: %v", err)
	}
	return []ModelRef{{Name: resolveFileModelName(path), Path: path, Source: RefSourceFile}}, nil
}

// ResolveDir lists the *.gguf files directly in dir, sorted by name. It
// does not descend into subdirectories and skips symbolic links that lead
// out of dir or to something other than a regular file. A directory
// without GGUF files is an ErrModelNotFound error.
func ResolveDir(dir string) ([]ModelRef, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, resolveErr(dir, ErrInvalidModelRef, err, "has no absolute path: %v", err)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, resolveErr(dir, ErrModelNotFound, err, "not found: no such directory")
		}
		return nil, resolveErr(dir, ErrInvalidModelRef, err, "cannot be opened as a models directory: %v", err)
	}
	defer root.Close()
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return nil, resolveErr(dir, ErrInvalidModelRef, err, "cannot be listed: %v", err)
	}
	var refs []ModelRef
	for _, e := range entries {
		if !strings.EqualFold(filepath.Ext(e.Name()), ".gguf") || e.IsDir() {
			continue
		}
		// root.Stat follows a symbolic link only while it stays in dir.
		info, err := root.Stat(e.Name())
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		path := filepath.Join(abs, e.Name())
		refs = append(refs, ModelRef{Name: resolveFileModelName(path), Path: path, Source: RefSourceDir})
	}
	if len(refs) == 0 {
		return nil, resolveErr(dir, ErrModelNotFound, nil, "has no .gguf files")
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].Path < refs[j].Path })
	return refs, nil
}

// resolveFileModelName is the model id of a GGUF file: its base name
// without the extension.
func resolveFileModelName(path string) string {
	base := filepath.Base(path)
	if ext := filepath.Ext(base); strings.EqualFold(ext, ".gguf") && len(base) > len(ext) {
		return base[:len(base)-len(ext)]
	}
	return base
}

// resolveLooksLikeOllamaName reports whether a missing path could have been
// meant as an Ollama name, such as "llama3.2:1b".
func resolveLooksLikeOllamaName(spec string) bool {
	if strings.ContainsAny(spec, `\`) || strings.HasPrefix(spec, ".") || strings.HasPrefix(spec, "/") ||
		strings.EqualFold(filepath.Ext(spec), ".gguf") {
		return false
	}
	_, err := parseOllamaName(spec)
	return err == nil
}
