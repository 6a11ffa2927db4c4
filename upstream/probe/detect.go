package probe

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Detect asks the engine at base (e.g. "http://127.0.0.1:8000") what it is
// and which models it serves.
//
// It first reads GET /v1/models, which every kind answers and in which
// vLLM, SGLang, llama.cpp and llmd name themselves (owned_by "vllm",
// "sglang", "llamacpp", "llmd"); it then asks that kind for its version
// (vLLM /version, SGLang /server_info, llama.cpp /props, which also gives
// the per-slot context). When the list names no known engine (Ollama's
// owned_by is the model's namespace, "library"; TGI's is the model id), or
// could not be read, it tries, in order: /api/version (Ollama), /info
// (TGI: "model_id" and "version"), /props (llama.cpp:
// "default_generation_settings" or "build_info"), /version (vLLM: an
// object whose only key is "version"), and last the series prefixes on
// /metrics (vllm:, sglang:, llamacpp:, tgi_; llmd_ next to vllm: is llmd).
// A probe that fails, answers 404 or answers something else is skipped;
// each is bounded by ctx and by its own timeout. A server that lists
// models but matches nothing is [KindOpenAI].
//
// Errors: when nothing matches, an error wrapping [ErrUnrecognized] (and
// the /v1/models failure, e.g. a 401 [*StatusError] for an engine that
// wants a key: send the key from hc's Transport). When the kind was found but
// /v1/models could not be read for another reason than 404, the Info
// found so far comes back with the error. A refused connection or a done
// ctx ends detection at once.
func Detect(ctx context.Context, hc *http.Client, base string) (Info, error) {
	c, err := newClient(hc, base)
	if err != nil {
		return Info{}, err
	}
	var info Info
	kind, models, listErr := c.listModels(ctx)
	if listErr != nil && unreachable(ctx, listErr) {
		return Info{}, fmt.Errorf("detect engine at %s: %w", c.base, listErr)
	}
	info.Kind, info.Models = kind, models
	switch kind {
	case KindVLLM:
		info.Version = c.vllmVersion(ctx)
	case KindSGLang:
		info.Version = c.sglangVersion(ctx)
	case KindLlamaCpp:
		if p, ok := c.llamaProps(ctx); ok {
			p.apply(&info)
		}
	case KindLLMD:
		// llmd publishes no version route.
	default:
		if !c.identify(ctx, &info) {
			if err := ctx.Err(); err != nil {
				return Info{}, fmt.Errorf("detect engine at %s: %w", c.base, err)
			}
			if listErr != nil {
				return Info{}, fmt.Errorf("%w at %s: %w", ErrUnrecognized, c.base, listErr)
			}
			info.Kind = KindOpenAI
		}
	}
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("detect engine at %s: %w", c.base, err)
	}
	if listErr != nil && !(isStatus(listErr, http.StatusNotFound) && len(info.Models) > 0) {
		return info, fmt.Errorf("detect engine at %s: found %s, but cannot list its models: %w", c.base, info.Kind, listErr)
	}
	return info, nil
}

// modelEntry is one entry of a /v1/models answer, with the fields the
// engines add: max_model_len (vLLM, SGLang, llmd) and meta.n_ctx
// (llama.cpp; older builds only give n_ctx_train, the training context,
// which is not what the server allows).
type modelEntry struct {
	ID          string `json:"id"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len"`
	Root        string `json:"root"`
	Meta        struct {
		NCtx int `json:"n_ctx"`
	} `json:"meta"`
}

// owners maps the owned_by values engines write about themselves.
var owners = map[string]Kind{
	"vllm":     KindVLLM,
	"sglang":   KindSGLang,
	"llamacpp": KindLlamaCpp,
	"llmd":     KindLLMD,
}

// listModels reads /v1/models. kind is the engine the entries name, ""
// when none does. An answer that is not a model list is an error.
func (c *client) listModels(ctx context.Context) (Kind, []ModelInfo, error) {
	var list struct {
		Object string       `json:"object"`
		Data   []modelEntry `json:"data"`
	}
	if err := c.getJSON(ctx, "/v1/models", &list); err != nil {
		return "", nil, err
	}
	if list.Object != "list" && list.Data == nil {
		return "", nil, fmt.Errorf("GET %s/v1/models: not a model list", c.base)
	}
	var kind Kind
	models := make([]ModelInfo, 0, len(list.Data))
	for _, e := range list.Data {
		if e.ID == "" {
			continue
		}
		if k, ok := owners[e.OwnedBy]; ok && kind == "" {
			kind = k
		}
		n := e.MaxModelLen
		if n <= 0 {
			n = max(e.Meta.NCtx, 0)
		}
		models = append(models, ModelInfo{ID: e.ID, MaxModelLen: n, Root: e.Root})
	}
	return kind, models, nil
}

// identify runs the probes for an engine whose model list did not name
// it, most specific first, and reports whether one matched. It stops when
// ctx is done.
func (c *client) identify(ctx context.Context, info *Info) bool {
	probes := []func(context.Context, *Info) bool{
		c.probeOllama,
		c.probeTGI,
		c.probeLlamaCpp,
		c.probeVLLM,
		c.probeMetrics,
	}
	for _, p := range probes {
		if ctx.Err() != nil {
			return false
		}
		if p(ctx, info) {
			return true
		}
	}
	return false
}

// probeOllama: GET /api/version answers {"version": "0.11.4"}.
func (c *client) probeOllama(ctx context.Context, info *Info) bool {
	var v struct {
		Version string `json:"version"`
	}
	if c.getJSON(ctx, "/api/version", &v) != nil || v.Version == "" {
		return false
	}
	info.Kind, info.Version = KindOllama, v.Version
	return true
}

// tgiInfo is the part of TGI's GET /info read here.
type tgiInfo struct {
	ModelID        string `json:"model_id"`
	Version        string `json:"version"`
	MaxTotalTokens int    `json:"max_total_tokens"`
}

// probeTGI: GET /info has model_id and version (and max_total_tokens, the
// prompt-plus-output limit).
func (c *client) probeTGI(ctx context.Context, info *Info) bool {
	var t tgiInfo
	if c.getJSON(ctx, "/info", &t) != nil || t.ModelID == "" || t.Version == "" {
		return false
	}
	info.Kind, info.Version = KindTGI, t.Version
	n := max(t.MaxTotalTokens, 0)
	if len(info.Models) == 0 {
		info.Models = []ModelInfo{{ID: t.ModelID, MaxModelLen: n}}
		return true
	}
	for i := range info.Models {
		if m := &info.Models[i]; m.MaxModelLen == 0 && (m.ID == t.ModelID || len(info.Models) == 1) {
			m.MaxModelLen = n
		}
	}
	return true
}

// llamaProps is the part of llama.cpp's GET /props read here.
type llamaProps struct {
	DefaultGenerationSettings *struct {
		NCtx int `json:"n_ctx"` // per slot: what one request may use
	} `json:"default_generation_settings"`
	BuildInfo  string `json:"build_info"`
	ModelAlias string `json:"model_alias"`
	ModelPath  string `json:"model_path"`
}

// llamaProps reads /props; ok is false when it is not llama.cpp's.
func (c *client) llamaProps(ctx context.Context) (llamaProps, bool) {
	var p llamaProps
	if c.getJSON(ctx, "/props", &p) != nil || (p.DefaultGenerationSettings == nil && p.BuildInfo == "") {
		return llamaProps{}, false
	}
	return p, true
}

// apply sets the version, and the context of a single model that the
// list gave none (or the model itself when there was no list). With
// several models (llama-server's router mode) /props speaks for none of
// them.
func (p llamaProps) apply(info *Info) {
	info.Version = p.BuildInfo
	nctx := 0
	if p.DefaultGenerationSettings != nil {
		nctx = max(p.DefaultGenerationSettings.NCtx, 0)
	}
	switch len(info.Models) {
	case 0:
		id := p.ModelAlias
		if id == "" {
			id = p.ModelPath
		}
		if id != "" {
			info.Models = []ModelInfo{{ID: id, MaxModelLen: nctx, Root: p.ModelPath}}
		}
	case 1:
		if info.Models[0].MaxModelLen == 0 {
			info.Models[0].MaxModelLen = nctx
		}
		if info.Models[0].Root == "" {
			info.Models[0].Root = p.ModelPath
		}
	}
}

func (c *client) probeLlamaCpp(ctx context.Context, info *Info) bool {
	p, ok := c.llamaProps(ctx)
	if !ok {
		return false
	}
	info.Kind = KindLlamaCpp
	p.apply(info)
	return true
}

// probeVLLM: GET /version answers an object whose only key is "version".
// vLLM names itself on /v1/models, so this matters when that list is
// refused (vLLM's --api-key guards /v1/* only); the strict shape keeps
// other servers' /version out.
func (c *client) probeVLLM(ctx context.Context, info *Info) bool {
	v, ok := c.vllmVersionStrict(ctx)
	if !ok {
		return false
	}
	info.Kind, info.Version = KindVLLM, v
	return true
}

func (c *client) vllmVersionStrict(ctx context.Context) (string, bool) {
	var m map[string]json.RawMessage
	if c.getJSON(ctx, "/version", &m) != nil || len(m) != 1 {
		return "", false
	}
	var v string
	if json.Unmarshal(m["version"], &v) != nil || v == "" {
		return "", false
	}
	return v, true
}

// vllmVersion is the version of an engine known to be vLLM; "" when
// /version does not say.
func (c *client) vllmVersion(ctx context.Context) string {
	var v struct {
		Version string `json:"version"`
	}
	if c.getJSON(ctx, "/version", &v) != nil {
		return ""
	}
	return v.Version
}

// sglangVersion reads "version" from /server_info, or from
// /get_server_info, its older (now deprecated) name; "" when neither says.
func (c *client) sglangVersion(ctx context.Context) string {
	for _, path := range []string{"/server_info", "/get_server_info"} {
		var v struct {
			Version string `json:"version"`
		}
		err := c.getJSON(ctx, path, &v)
		if err == nil && v.Version != "" {
			return v.Version
		}
		if err == nil || !isStatus(err, http.StatusNotFound) {
			return ""
		}
	}
	return ""
}

// metricPrefixes are the series prefixes that name an engine, checked in
// order after llmd (which exposes vllm: names next to its own llmd_).
var metricPrefixes = []struct {
	prefix string
	kind   Kind
}{
	{"vllm:", KindVLLM},
	{"sglang:", KindSGLang},
	{"llamacpp:", KindLlamaCpp},
	{"tgi_", KindTGI},
}

// probeMetrics names the engine from the series on /metrics.
func (c *client) probeMetrics(ctx context.Context, info *Info) bool {
	body, err := c.get(ctx, "/metrics", acceptMetrics, maxMetricsBytes)
	if err != nil {
		return false
	}
	k := kindOfExposition(body)
	if k == "" {
		return false
	}
	info.Kind = k
	return true
}

// kindOfExposition returns the engine whose series prefixes appear in a
// Prometheus text exposition, "" for none.
func kindOfExposition(body []byte) Kind {
	seen := map[Kind]bool{}
	llmd := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), maxMetricsBytes)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			line = rest
		} else if strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "llmd_") {
			llmd = true
		}
		for _, p := range metricPrefixes {
			if strings.HasPrefix(line, p.prefix) {
				seen[p.kind] = true
			}
		}
	}
	if llmd && seen[KindVLLM] {
		return KindLLMD
	}
	for _, p := range metricPrefixes {
		if seen[p.kind] {
			return p.kind
		}
	}
	return ""
}
