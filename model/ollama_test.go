package model

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ollamaTestStore is an Ollama store in a temporary directory.
type ollamaTestStore struct {
	t    *testing.T
	root string
}

func newOllamaTestStore(t *testing.T) *ollamaTestStore {
	t.Helper()
	return &ollamaTestStore{t: t, root: filepath.Join(t.TempDir(), "models")}
}

// blob stores content and returns its digest ("sha256:<hex>").
func (s *ollamaTestStore) blob(content string) string {
	s.t.Helper()
	sum := sha256.Sum256([]byte(content))
	digest := "sha256:" + hex.EncodeToString(sum[:])
	dir := filepath.Join(s.root, "blobs")
	require.NoError(s.t, os.MkdirAll(dir, 0o755))
	require.NoError(s.t, os.WriteFile(filepath.Join(dir, "sha256-"+digest[7:]), []byte(content), 0o644))
	return digest
}

// manifest writes raw as the manifest of host/namespace/model:tag.
func (s *ollamaTestStore) manifest(host, namespace, model, tag, raw string) string {
	s.t.Helper()
	dir := filepath.Join(s.root, "manifests", host, namespace, model)
	require.NoError(s.t, os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, tag)
	require.NoError(s.t, os.WriteFile(path, []byte(raw), 0o644))
	return path
}

// model writes a manifest with a model layer (and a template layer when
// template is set) and returns the model blob's path.
func (s *ollamaTestStore) model(host, namespace, model, tag, template string) string {
	s.t.Helper()
	content := "GGUF fake model " + model + ":" + tag
	digest := s.blob(content)
	layers := []ollamaLayer{{MediaType: ollamaMediaModel, Digest: digest, Size: int64(len(content))}}
	if template != "" {
		layers = append(layers, ollamaLayer{MediaType: ollamaMediaTemplate, Digest: s.blob(template), Size: int64(len(template))})
	}
	s.manifest(host, namespace, model, tag, ollamaTestManifest(layers...))
	return filepath.Join(s.root, "blobs", "sha256-"+digest[7:])
}

func ollamaTestManifest(layers ...ollamaLayer) string {
	b, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.docker.distribution.manifest.v2+json",
		"config":        map[string]any{"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:" + strings.Repeat("0", 64), "size": 1},
		"layers":        layers,
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestResolveOllama(t *testing.T) {
	t.Parallel()
	s := newOllamaTestStore(t)
	latest := s.model(ollamaDefaultHost, "library", "llama3.2", "latest", "")
	oneB := s.model(ollamaDefaultHost, "library", "llama3.2", "1b", "{{ .Prompt }}")
	user := s.model(ollamaDefaultHost, "someone", "tiny", "v1", "")
	hf := s.model("hf.co", "bartowski", "Llama-3.2-1B-Instruct-GGUF", "Q4_K_M", "")
	lower := s.model(ollamaDefaultHost, "library", "mistral", "7b", "")

	tests := map[string]struct {
		spec     string
		name     string
		path     string
		template bool
	}{
		"name only":               {"ollama:llama3.2", "llama3.2:latest", latest, false},
		"name and tag":            {"ollama:llama3.2:1b", "llama3.2:1b", oneB, true},
		"default namespace":       {"ollama:library/llama3.2:1b", "llama3.2:1b", oneB, true},
		"full name":               {"ollama:registry.ollama.ai/library/llama3.2", "llama3.2:latest", latest, false},
		"namespace":               {"ollama:someone/tiny:v1", "someone/tiny:v1", user, false},
		"host":                    {"ollama:hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M", "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M", hf, false},
		"stored in lower case":    {"ollama:Mistral:7B", "Mistral:7B", lower, false},
		"dash form of the digest": {"ollama:dashed", "dashed:latest", "", false},
	}
	// A manifest may write the digest as sha256-<hex>.
	d := s.blob("dashed model")
	s.manifest(ollamaDefaultHost, "library", "dashed", "latest",
		ollamaTestManifest(ollamaLayer{MediaType: ollamaMediaModel, Digest: "sha256-" + d[7:]}))
	tests["dash form of the digest"] = struct {
		spec     string
		name     string
		path     string
		template bool
	}{"ollama:dashed", "dashed:latest", filepath.Join(s.root, "blobs", "sha256-"+d[7:]), false}

	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			refs, err := Resolve(tc.spec, ResolveEnv{OllamaModels: s.root, Home: "/nonexistent"})
			require.NoError(t, err)
			require.Len(t, refs, 1)
			ref := refs[0]
			require.Equal(t, tc.name, ref.Name)
			require.Equal(t, tc.path, ref.Path)
			require.Equal(t, RefSourceOllama, ref.Source)
			if tc.template {
				require.FileExists(t, ref.TemplatePath)
				require.True(t, strings.HasPrefix(ref.TemplatePath, filepath.Join(s.root, "blobs")+string(filepath.Separator)))
			} else {
				require.Empty(t, ref.TemplatePath)
			}
		})
	}

	t.Run("store under HOME", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		hs := &ollamaTestStore{t: t, root: filepath.Join(home, ".ollama", "models")}
		path := hs.model(ollamaDefaultHost, "library", "qwen2", "latest", "")
		refs, err := Resolve("ollama:qwen2", ResolveEnv{Home: home})
		require.NoError(t, err)
		require.Equal(t, []ModelRef{{Name: "qwen2:latest", Path: path, Source: RefSourceOllama}}, refs)
	})

	t.Run("blob linked inside the store", func(t *testing.T) {
		t.Parallel()
		ls := newOllamaTestStore(t)
		target := ls.blob("the real model")
		link := strings.Repeat("ab", 32)
		require.NoError(t, os.Symlink("sha256-"+target[7:], filepath.Join(ls.root, "blobs", "sha256-"+link)))
		ls.manifest(ollamaDefaultHost, "library", "linked", "latest",
			ollamaTestManifest(ollamaLayer{MediaType: ollamaMediaModel, Digest: "sha256:" + link}))
		refs, err := Resolve("ollama:linked", ResolveEnv{OllamaModels: ls.root})
		require.NoError(t, err)
		require.Equal(t, filepath.Join(ls.root, "blobs", "sha256-"+link), refs[0].Path)
	})
}

func TestResolveOllamaNotFound(t *testing.T) {
	t.Parallel()
	s := newOllamaTestStore(t)
	s.model(ollamaDefaultHost, "library", "llama3.2", "1b", "")

	_, err := Resolve("ollama:llama3.2", ResolveEnv{OllamaModels: s.root})
	require.ErrorIs(t, err, ErrModelNotFound)
	var re *ResolveError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "ollama:llama3.2", re.Spec)
	require.EqualError(t, err, `model "ollama:llama3.2" not found in `+s.root+`: pull it with "ollama pull llama3.2"`)

	_, err = Resolve("ollama:llama3.2", ResolveEnv{Home: "/home/u-does-not-exist"})
	require.ErrorIs(t, err, ErrModelNotFound)
	require.EqualError(t, err, `model "ollama:llama3.2" not found: there is no Ollama store at /home/u-does-not-exist/.ollama/models: `+
		`pull it with "ollama pull llama3.2"`)

	_, err = Resolve("ollama:llama3.2", ResolveEnv{})
	require.ErrorIs(t, err, ErrModelNotFound)
	require.ErrorContains(t, err, "neither OLLAMA_MODELS nor HOME is set")

	// The manifest is there but its blob was deleted.
	digest := "sha256:" + strings.Repeat("c", 64)
	s.manifest(ollamaDefaultHost, "library", "gone", "latest", ollamaTestManifest(ollamaLayer{MediaType: ollamaMediaModel, Digest: digest}))
	_, err = Resolve("ollama:gone", ResolveEnv{OllamaModels: s.root})
	require.ErrorIs(t, err, ErrModelNotFound)
	require.ErrorContains(t, err, "is missing: pull the model again")
}

// Hostile names and manifests: each is a clean ErrInvalidModelRef, and
// nothing outside the store is resolved, even where a naive path join
// would have found a file there.
func TestResolveOllamaHostile(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	root := filepath.Join(base, "store", "models")
	s := &ollamaTestStore{t: t, root: root}
	s.blob("keeps blobs/ in place")

	// Files outside the store that a traversal would reach.
	outside := filepath.Join(base, "outside")
	require.NoError(t, os.MkdirAll(outside, 0o755))
	secret := filepath.Join(outside, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("TOP-SECRET"), 0o600))
	outsideHex := strings.Repeat("e", 64)
	require.NoError(t, os.WriteFile(filepath.Join(outside, "sha256-"+outsideHex), []byte("outside blob"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(base, "store", "etc-passwd"), []byte("root:x:0:0"), 0o600))

	layer := func(digest string) string {
		return ollamaTestManifest(ollamaLayer{MediaType: ollamaMediaModel, Digest: digest})
	}
	manifest := func(model, raw string) string {
		s.manifest(ollamaDefaultHost, "library", model, "latest", raw)
		return "ollama:" + model
	}
	relSecret, err := filepath.Rel(filepath.Join(root, "blobs"), secret)
	require.NoError(t, err)

	specs := map[string]string{
		"digest with ../":          manifest("traversal", layer("sha256:../../../outside/secret")),
		"digest relative to blobs": manifest("traversal2", layer("sha256-"+relSecret)),
		"digest ../ of 64 chars":   manifest("traversal3", layer("sha256:"+strings.Repeat("../", 21)+"x")),
		"uppercase digest":         manifest("upper", layer("sha256:"+strings.Repeat("A", 64))),
		"short digest":             manifest("short", layer("sha256:abc123")),
		"long digest":              manifest("long", layer("sha256:"+strings.Repeat("a", 65))),
		"digest with a newline":    manifest("newline", layer("sha256:"+strings.Repeat("a", 64)+"\n")),
		"digest with a NUL":        manifest("nul", layer("sha256:"+strings.Repeat("a", 63)+"\x00")),
		"sha512 digest":            manifest("sha512", layer("sha512:"+strings.Repeat("a", 128))),
		"empty digest":             manifest("empty", layer("")),
		"template digest with ../": manifest("tmpl", ollamaTestManifest(ollamaLayer{MediaType: ollamaMediaModel, Digest: s.blob("m")}, ollamaLayer{MediaType: ollamaMediaTemplate, Digest: "sha256:../../outside/secret"})),
		"not JSON":                 manifest("notjson", "this is not json {"),
		"JSON of the wrong shape":  manifest("wrongshape", `{"layers": "nope"}`),
		"huge manifest":            manifest("huge", `{"layers": [], "pad": "`+strings.Repeat("x", ollamaMaxManifestBytes)+`"}`),
		"no model layer":           manifest("nomodel", ollamaTestManifest(ollamaLayer{MediaType: "application/vnd.ollama.image.license", Digest: s.blob("MIT")})),
		"no layers":                manifest("nolayers", `{"schemaVersion": 2, "layers": []}`),
		"manifest list":            manifest("list", `{"schemaVersion": 2, "mediaType": "`+ollamaMediaManifestList+`", "manifests": []}`),
		"name with ..":             "ollama:../../etc/passwd",
		"model part ..":            "ollama:library/..:latest",
		"dots in the model":        "ollama:llama..3",
		"namespace with a dot":     "ollama:a.b/model",
		"tag ..":                   "ollama:model:..",
		"leading dot":              "ollama:.hidden",
		"too many parts":           "ollama:a/b/c/d",
		"empty tag":                "ollama:llama3:",
		"empty name":               "ollama:",
		"absolute name":            "ollama:/etc/passwd",
		"NUL in the name":          "ollama:llama\x003",
		"backslash":                `ollama:..\..\etc`,
		"digest suffix":            "ollama:llama3@sha256:" + strings.Repeat("a", 64),
		"overlong part":            "ollama:" + strings.Repeat("m", 129),
		"overlong name":            "ollama:" + strings.Repeat("h", 250) + "/" + strings.Repeat("n", 128) + "/" + strings.Repeat("m", 128) + ":" + strings.Repeat("t", 10),
	}

	// A blob that is a directory.
	dirHex := strings.Repeat("d", 64)
	require.NoError(t, os.MkdirAll(filepath.Join(root, "blobs", "sha256-"+dirHex), 0o755))
	specs["blob is a directory"] = manifest("dirblob", layer("sha256:"+dirHex))

	// A blob that is a symbolic link out of the store.
	linkHex := strings.Repeat("f", 64)
	require.NoError(t, os.Symlink(filepath.Join(outside, "sha256-"+outsideHex), filepath.Join(root, "blobs", "sha256-"+linkHex)))
	specs["blob links outside"] = manifest("linkout", layer("sha256:"+linkHex))
	relHex := strings.Repeat("9", 64)
	require.NoError(t, os.Symlink("../../../outside/secret", filepath.Join(root, "blobs", "sha256-"+relHex)))
	specs["blob links outside relatively"] = manifest("linkrel", layer("sha256:"+relHex))

	// A manifest that is a symbolic link out of the store (to a valid
	// manifest there), and a model directory that is one.
	require.NoError(t, os.WriteFile(filepath.Join(outside, "manifest"), []byte(layer("sha256:"+strings.Repeat("a", 64))), 0o600))
	mdir := filepath.Join(root, "manifests", ollamaDefaultHost, "library", "mlink")
	require.NoError(t, os.MkdirAll(mdir, 0o755))
	require.NoError(t, os.Symlink(filepath.Join(outside, "manifest"), filepath.Join(mdir, "latest")))
	specs["manifest links outside"] = "ollama:mlink"
	require.NoError(t, os.MkdirAll(filepath.Join(outside, "dirlink"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "dirlink", "latest"), []byte(layer(s.blob("x"))), 0o600))
	require.NoError(t, os.Symlink(filepath.Join(outside, "dirlink"), filepath.Join(root, "manifests", ollamaDefaultHost, "library", "dlink")))
	specs["model directory links outside"] = "ollama:dlink"

	// A blob shorter than the manifest says (an interrupted pull).
	short := s.blob("short")
	specs["truncated blob"] = manifest("truncated",
		ollamaTestManifest(ollamaLayer{MediaType: ollamaMediaModel, Digest: short, Size: 1 << 30}))

	// A manifest path that is a directory.
	require.NoError(t, os.MkdirAll(filepath.Join(root, "manifests", ollamaDefaultHost, "library", "tagdir", "latest"), 0o755))
	specs["manifest is a directory"] = "ollama:tagdir"

	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			refs, err := Resolve(spec, ResolveEnv{OllamaModels: root})
			require.ErrorIs(t, err, ErrInvalidModelRef, "%v", err)
			require.Nil(t, refs)
			var re *ResolveError
			require.ErrorAs(t, err, &re)
			require.Equal(t, spec, re.Spec)
			require.True(t, strings.HasPrefix(err.Error(), "model "), err.Error())
			require.NotContains(t, err.Error(), "TOP-SECRET")
			require.NotContains(t, err.Error(), "root:x")
		})
	}

	// Nothing outside the store changed.
	b, err := os.ReadFile(secret)
	require.NoError(t, err)
	require.Equal(t, "TOP-SECRET", string(b))
}

func TestParseOllamaName(t *testing.T) {
	t.Parallel()
	tests := map[string]ollamaName{
		"llama3.2":                    {ollamaDefaultHost, "library", "llama3.2", "latest"},
		"llama3.2:1b":                 {ollamaDefaultHost, "library", "llama3.2", "1b"},
		"me/model:v1.0":               {ollamaDefaultHost, "me", "model", "v1.0"},
		"hf.co/org/Model-GGUF:Q4_K_M": {"hf.co", "org", "Model-GGUF", "Q4_K_M"},
		"localhost/ns/m:_t":           {"localhost", "ns", "m", "_t"},
	}
	for in, want := range tests {
		got, err := parseOllamaName(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", ":", "a:", ":b", "a/", "/a", "a//b", "a/b/c/d", "a b", "a\tb", "a+b", "a@b", "host:1234/ns/m", "-a", "a/-b"} {
		_, err := parseOllamaName(in)
		require.Error(t, err, in)
	}
}
