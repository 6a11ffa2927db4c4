package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/quota"
)

// Limits of the OpenAI API.
const (
	maxStopStrings = 4
	// defaultCompletionMaxTokens is the OpenAI default of max_tokens for
	// /v1/completions.
	defaultCompletionMaxTokens = 16
	maxClientRequestIDLen      = 128
	maxLoggedModelLen          = 256
)

// reqLog is what the one log line of a finished generation request says.
type reqLog struct {
	id       string
	clientID string
	endpoint string
	tenant   string
	keyID    string // "" for anonymous requests
	// tier is the tenant's tier; degraded says how the degradation ladder
	// changed the request ("" when it did not).
	tier     string
	degraded string
	// limits are the tenant's quota limits; quotaKnown says tier and
	// limits are looked up.
	limits     quota.Limits
	quotaKnown bool
	model      string
	stream     bool
	start      time.Time
	// status is the HTTP status sent (200 once a stream has started), or
	// statusClientClosed; 0 until the response starts.
	status int
	finish string
	usage  engine.Usage
	ttft   time.Duration
	err    error
	// metering: whether the request reached the engine's admission
	// (metered), its queue time, choice 0's token times, and whether its
	// final usage row is written.
	metered bool
	// detached is set when a stream's relay goroutine owns the request
	// and writes its log line.
	detached bool
	// live is the request's entry in the registry (resume, cancel,
	// snapshot).
	live *eventLog
	// peer is the node that forwarded this request to this one; route
	// is where this node sent it ("" when served here unrouted), body
	// the request body as read, kept for forwarding.
	peer     string
	route    string
	servedBy string // the peer that served it, "" if this node did
	body     []byte
	fellBack bool // sent to its model's fallback (once at most)
	// itl is the mean inter-token latency reported by the peer that
	// served the request (times is empty then).
	itl      time.Duration
	queued   time.Duration
	times    tokenTimes
	recorded bool
}

func (rl *reqLog) fail(status int, err error) {
	rl.status = status
	rl.err = err
}

// idPrefix is the request id prefix of each logged endpoint.
var idPrefix = map[string]string{
	"chat.completions": "chatcmpl-",
	"completions":      "cmpl-",
	"chat":             "req_",
	"tokenize":         "tok-",
	"detokenize":       "detok-",
}

// api wraps a handler: it answers a wrong method with 405 and, for the
// generation endpoints (endpoint != ""), assigns the request id and writes
// the request's log line.
func (s *Server) api(method, endpoint string, pol policy, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every answer carries an id, refusals included; a generation
		// request replaces it with its own below.
		w.Header().Set("X-Request-Id", newID("req_"))
		p, err := s.authenticate(r, pol)
		if err != nil {
			if re := authError(err); re != nil {
				writeError(w, "", re)
				return
			}
			s.log.Error("authentication failed", "path", r.URL.Path, "err", err)
			writeError(w, "", err)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
		if method != "" && r.Method != method && (method != http.MethodGet || r.Method != http.MethodHead) {
			w.Header().Set("Allow", method)
			writeError(w, "", &requestError{Status: http.StatusMethodNotAllowed, Type: typeInvalidRequest,
				Message: fmt.Sprintf("method %s is not allowed on %s; use %s", r.Method, r.URL.Path, method)})
			return
		}
		if endpoint == "" {
			id := w.Header().Get("X-Request-Id")
			defer func() {
				if v := recover(); v != nil {
					if v == http.ErrAbortHandler { //nolint:errorlint // sentinel panic value
						panic(v)
					}
					s.log.Error("handler panic", "request_id", id, "path", r.URL.Path, "panic", fmt.Sprint(v),
						"stack", string(debug.Stack()))
					writeError(w, id, errors.New("daemon: handler panic"))
				}
			}()
			h(w, r, nil)
			return
		}
		rl := &reqLog{
			id:       cmp.Or(p.requestID, newID(idPrefix[endpoint])),
			peer:     p.peer,
			clientID: capHeader(r.Header.Get("X-Request-Id"), maxClientRequestIDLen),
			endpoint: endpoint,
			tenant:   p.tenant,
			keyID:    p.keyID,
			start:    time.Now(),
		}
		w.Header().Set("X-Request-Id", rl.id)
		if s.cluster != nil && p.peer == "" {
			r.Body = &recordingBody{ReadCloser: r.Body, buf: &rl.body}
		}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler { //nolint:errorlint // sentinel panic value
					panic(v)
				}
				s.log.Error("handler panic", "request_id", rl.id, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				if rl.status != 0 {
					panic(http.ErrAbortHandler)
				}
				rl.fail(writeError(w, rl.id, errors.New("daemon: handler panic")), fmt.Errorf("panic: %v", v))
			}
			if !rl.detached {
				s.logRequest(rl)
			}
		}()
		h(w, r, rl)
	})
}

// logRequest writes the one line of a finished request.
func (s *Server) logRequest(rl *reqLog) {
	level := slog.LevelInfo
	if rl.err != nil {
		// A stream's status is 200 whatever happens after it starts: rank
		// by what the error would have been.
		switch st := apiErrorFor(rl.err, rl.id).Status; {
		case st == http.StatusServiceUnavailable:
			level = slog.LevelWarn
		case st >= 500:
			level = slog.LevelError
		}
	}
	attrs := []slog.Attr{
		slog.String("request_id", rl.id),
		slog.String("endpoint", rl.endpoint),
		slog.String("tenant", rl.tenant),
		slog.String("tier", rl.tier),
		slog.String("node", s.cfg.NodeID),
		slog.String("model", rl.model),
		slog.Bool("stream", rl.stream),
		slog.Int("status", rl.status),
		slog.String("finish_reason", rl.finish),
		slog.Int("input_tokens", rl.usage.InputTokens),
		slog.Int("cached_tokens", rl.usage.CachedTokens),
		slog.Int("output_tokens", rl.usage.OutputTokens),
		slog.Int64("ttft_ms", rl.ttft.Milliseconds()),
		slog.Int64("queue_ms", rl.queued.Milliseconds()),
		slog.Float64("itl_ms", float64(rl.meanITL().Microseconds())/1000),
		slog.Int64("duration_ms", time.Since(rl.start).Milliseconds()),
	}
	if rl.clientID != "" {
		attrs = append(attrs, slog.String("client_request_id", rl.clientID))
	}
	if rl.keyID != "" {
		attrs = append(attrs, slog.String("key_id", rl.keyID))
	}
	if rl.degraded != "" {
		attrs = append(attrs, slog.String("degraded", rl.degraded))
	}
	if rl.route != "" {
		attrs = append(attrs, slog.String("route", rl.route))
	}
	if rl.peer != "" {
		attrs = append(attrs, slog.String("forwarded_by", rl.peer))
	}
	if rl.err != nil {
		attrs = append(attrs, slog.String("error", rl.err.Error()))
	}
	s.log.LogAttrs(context.Background(), level, "request", attrs...)
}

// decode reads the JSON body into v under the size limit. Its errors are
// for writeError.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = terr
			if err == nil {
				err = errors.New("unexpected data after the JSON object")
			}
		}
	}
	var (
		mbe *http.MaxBytesError
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &mbe), errors.As(err, &syn):
		return err
	case errors.As(err, &typ):
		if typ.Field == "" {
			return invalidParam("", "request body must be a JSON object")
		}
		return err
	case errors.Is(err, io.EOF):
		return invalidParam("", "request body is empty; expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalidParam("", "request body is not valid JSON: unexpected end of input")
	default:
		return invalidParam("", "invalid request body: %v", err)
	}
}

// lookup finds the model a request names.
func (s *Server) lookup(id string) (*model, error) {
	if id == "" {
		return nil, invalidParam("model", "you must provide a model parameter")
	}
	if m := s.byID[id]; m != nil {
		return m, nil
	}
	return nil, &requestError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "model", Code: codeModelNotFound,
		Message: fmt.Sprintf("The model `%s` does not exist. Available models: %s.", id, strings.Join(s.Models(), ", "))}
}

// params are the sampling parameters common to every generation endpoint.
type params struct {
	temperature, topP *float64
	n                 *int
	presence, freq    *float64
	stop              api.Stop
	seed              *int64
	topK              *int
	minP, repetition  *float64
	logitBias         map[string]float64
}

// checkExtra validates vLLM's extra sampling parameters and fills j's
// sampling.
func (s *Server) checkExtra(p params, j *job) error {
	if p.topK != nil {
		if *p.topK < -1 {
			return invalidParam("top_k", "top_k must be -1 or 0 (off) or a positive count, got %d", *p.topK)
		}
		j.sampling.TopK = max(*p.topK, 0)
	}
	if p.minP != nil {
		if !(*p.minP >= 0 && *p.minP <= 1) {
			return invalidParam("min_p", "min_p must be between 0 and 1, got %v", *p.minP)
		}
		j.sampling.MinP = *p.minP
	}
	if p.repetition != nil {
		if !(*p.repetition > 0 && *p.repetition <= 10) {
			return invalidParam("repetition_penalty", "repetition_penalty must be above 0 and at most 10, got %v", *p.repetition)
		}
		j.sampling.RepetitionPenalty = *p.repetition
	}
	if len(p.logitBias) > maxLogitBias {
		return invalidParam("logit_bias", "logit_bias may hold at most %d entries, got %d", maxLogitBias, len(p.logitBias))
	}
	for k, v := range p.logitBias {
		id, err := strconv.ParseInt(k, 10, 32)
		if vocab := j.model.text.VocabSize(); err != nil || id < 0 || (vocab > 0 && int(id) >= vocab) {
			return invalidParam("logit_bias", "logit_bias key %q is not a token id of this model (0 to %d)", k, vocab-1)
		}
		if !(v >= -100 && v <= 100) {
			return invalidParam("logit_bias", "logit_bias values must be between -100 and 100, got %v for token %s", v, k)
		}
		if j.sampling.LogitBias == nil {
			j.sampling.LogitBias = make(map[int32]float32, len(p.logitBias))
		}
		j.sampling.LogitBias[int32(id)] = float32(v)
	}
	return nil
}

// maxLogitBias bounds logit_bias entries per request.
const maxLogitBias = 1024

// check validates p against the OpenAI ranges and fills j's sampling.
func (s *Server) check(p params, j *job) error {
	j.sampling = engine.SamplingParams{Temperature: 1, TopP: 1}
	if t := p.temperature; t != nil {
		if !(*t >= 0 && *t <= 2) {
			return invalidParam("temperature", "temperature must be between 0 and 2, got %v", *t)
		}
		j.sampling.Temperature = *t
	}
	if t := p.topP; t != nil {
		if !(*t > 0 && *t <= 1) {
			return invalidParam("top_p", "top_p must be greater than 0 and at most 1, got %v", *t)
		}
		j.sampling.TopP = *t
	}
	j.n = 1
	if p.n != nil {
		if *p.n < 1 || *p.n > s.cfg.MaxN {
			return invalidParam("n", "n must be between 1 and %d, got %d", s.cfg.MaxN, *p.n)
		}
		j.n = *p.n
	}
	for _, pen := range []struct {
		name string
		v    *float64
	}{{"presence_penalty", p.presence}, {"frequency_penalty", p.freq}} {
		if pen.v != nil && !(*pen.v >= -2 && *pen.v <= 2) {
			return invalidParam(pen.name, "%s must be between -2 and 2, got %v", pen.name, *pen.v)
		}
	}
	if p.presence != nil {
		j.sampling.PresencePenalty = *p.presence
	}
	if p.freq != nil {
		j.sampling.FrequencyPenalty = *p.freq
	}
	if err := s.checkExtra(p, j); err != nil {
		return err
	}
	if len(p.stop) > maxStopStrings {
		return invalidParam("stop", "stop may hold at most %d strings, got %d", maxStopStrings, len(p.stop))
	}
	for _, st := range p.stop {
		if st == "" {
			return invalidParam("stop", "stop strings must not be empty")
		}
	}
	j.stops = slices.Clone(p.stop)
	if p.seed != nil {
		j.seed = uint64(*p.seed)
	} else {
		j.seed = promptSeed(j.prompt)
	}
	return nil
}

// checkMaxTokens validates a given max_tokens under the name param.
func checkMaxTokens(param string, v *int) error {
	if v != nil && *v < 1 {
		return invalidParam(param, "%s must be at least 1, got %d", param, *v)
	}
	return nil
}

// fit sets j.maxTokens: the requested count if the prompt plus it fit the
// context, else a context_length_exceeded error; with none requested, def
// (capped at the room left), or the whole room left when def is 0.
func fit(j *job, requested *int, def int, param string) error {
	limit := j.model.limit
	prompt := len(j.prompt)
	room := limit - prompt
	if requested != nil {
		if *requested > limit-prompt { // not prompt+requested: it may overflow
			return &requestError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: param, Code: codeContextLength,
				Message: contextLengthMessage(limit, prompt, *requested)}
		}
		j.maxTokens = *requested
		return nil
	}
	if room < 1 {
		return &requestError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: param, Code: codeContextLength,
			Message: fmt.Sprintf("This model's maximum context length is %d tokens. However, your %s resulted in %d tokens, "+
				"which leaves no room for the completion. Please reduce the length of the %s.", limit, param, prompt, param)}
	}
	j.maxTokens = room
	if def > 0 {
		j.maxTokens = min(def, room)
	}
	return nil
}

// checkMessages validates chat messages.
func checkMessages(msgs []api.Message) error {
	if len(msgs) == 0 {
		return invalidParam("messages", "messages must hold at least one message")
	}
	for i, m := range msgs {
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool", "function":
		default:
			return invalidParam(fmt.Sprintf("messages[%d].role", i),
				"messages[%d].role must be one of system, developer, user, assistant, tool, function; got %q", i, m.Role)
		}
	}
	return nil
}

func (s *Server) handleChatCompletions(w http.ResponseWriter, r *http.Request, rl *reqLog) {
	var req api.ChatCompletionRequest
	j, err := s.chatJob(w, r, rl, &req)
	if err != nil {
		if s.serveRemote(w, r, rl, err, func(r2 *http.Request) { s.handleChatCompletions(w, r2, rl) }) {
			return
		}
		rl.fail(writeError(w, rl.id, err), err)
		return
	}
	var em emitter
	if req.Stream {
		em = &chatStream{sw: s.streamWriter(rl, openaiResumable(r)), id: rl.id, model: j.model.id,
			created: time.Now().Unix(), n: j.n, includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
	} else {
		var col *collector
		col = newCollector(w, rl, j.n, func(texts []string, reasons []string, u engine.Usage) any {
			resp := api.ChatCompletion{ID: rl.id, Object: "chat.completion", Created: rl.start.Unix(), Model: j.model.id,
				Choices: make([]api.ChatChoice, len(texts)), Usage: openaiUsage(u)}
			for i := range texts {
				resp.Choices[i] = api.ChatChoice{Index: i, FinishReason: reasons[i],
					Message: api.ResponseMessage{Role: "assistant", Content: texts[i]}}
				if j.logprobs {
					resp.Choices[i].Logprobs = &api.ChoiceLogprobs{Content: col.takeLogprobs(i)}
				}
			}
			return resp
		})
		em = col
	}
	s.generate(w, r, rl, j, em)
}

func (s *Server) chatJob(w http.ResponseWriter, r *http.Request, rl *reqLog, req *api.ChatCompletionRequest) (*job, error) {
	if err := s.decode(w, r, req); err != nil {
		return nil, err
	}
	rl.model, rl.stream = capHeader(req.Model, maxLoggedModelLen), req.Stream
	m, err := s.lookup(req.Model)
	if err != nil {
		return nil, err
	}
	m, level := s.degradedLookup(r, rl, m)
	maxParam, maxTokens := "max_tokens", req.MaxTokens
	if req.MaxCompletionTokens != nil {
		maxParam, maxTokens = "max_completion_tokens", req.MaxCompletionTokens
	}
	if err := checkMaxTokens(maxParam, maxTokens); err != nil {
		return nil, err
	}
	if err := checkMessages(req.Messages); err != nil {
		return nil, err
	}
	prompt, err := m.text.ChatPrompt(req.Messages, true)
	if err != nil {
		return nil, err
	}
	j := &job{model: m, prompt: prompt, degrade: level, user: req.User}
	if err := s.check(params{temperature: req.Temperature, topP: req.TopP, n: req.N, presence: req.PresencePenalty,
		freq: req.FrequencyPenalty, stop: req.Stop, seed: req.Seed, topK: req.TopK, minP: req.MinP,
		repetition: req.RepetitionPenalty, logitBias: req.LogitBias}, j); err != nil {
		return nil, err
	}
	if err := checkLogprobs(req.Logprobs, req.TopLogprobs, j); err != nil {
		return nil, err
	}
	return j, fit(j, maxTokens, 0, "messages")
}

// maxTopLogprobs is OpenAI's limit on top_logprobs.
const maxTopLogprobs = 20

// checkLogprobs validates logprobs and top_logprobs and fills j.
func checkLogprobs(logprobs *bool, top *int, j *job) error {
	j.logprobs = logprobs != nil && *logprobs
	if top != nil {
		if *top < 0 || *top > maxTopLogprobs {
			return invalidParam("top_logprobs", "top_logprobs must be between 0 and %d, got %d", maxTopLogprobs, *top)
		}
		if !j.logprobs {
			return invalidParam("top_logprobs", "top_logprobs requires logprobs to be true")
		}
		j.topLogprobs = *top
	}
	if j.logprobs && !j.model.info.Logprobs {
		return invalidParam("logprobs", "model %s does not report logprobs (simulated models have no probabilities)", j.model.id)
	}
	return nil
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request, rl *reqLog) {
	var req api.CompletionRequest
	j, err := s.completionJob(w, r, rl, &req)
	if err != nil {
		if s.serveRemote(w, r, rl, err, func(r2 *http.Request) { s.handleCompletions(w, r2, rl) }) {
			return
		}
		rl.fail(writeError(w, rl.id, err), err)
		return
	}
	var em emitter
	if req.Stream {
		em = &completionStream{sw: s.streamWriter(rl, openaiResumable(r)), id: rl.id, model: j.model.id,
			created: time.Now().Unix(), includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
	} else {
		var col *collector
		col = newCollector(w, rl, j.n, func(texts []string, reasons []string, u engine.Usage) any {
			resp := api.Completion{ID: rl.id, Object: "text_completion", Created: rl.start.Unix(), Model: j.model.id,
				Choices: make([]api.CompletionChoice, len(texts)), Usage: openaiUsage(u)}
			for i := range texts {
				resp.Choices[i] = api.CompletionChoice{Index: i, Text: texts[i], FinishReason: &reasons[i]}
				if j.logprobs {
					var offset int
					resp.Choices[i].Logprobs = legacyLogprobs(col.takeLogprobs(i), &offset)
				}
			}
			return resp
		})
		em = col
	}
	s.generate(w, r, rl, j, em)
}

func (s *Server) completionJob(w http.ResponseWriter, r *http.Request, rl *reqLog, req *api.CompletionRequest) (*job, error) {
	if err := s.decode(w, r, req); err != nil {
		return nil, err
	}
	rl.model, rl.stream = capHeader(req.Model, maxLoggedModelLen), req.Stream
	m, err := s.lookup(req.Model)
	if err != nil {
		return nil, err
	}
	m, level := s.degradedLookup(r, rl, m)
	if err := checkMaxTokens("max_tokens", req.MaxTokens); err != nil {
		return nil, err
	}
	if req.Logprobs != nil && (*req.Logprobs < 0 || *req.Logprobs > maxCompletionLogprobs) {
		return nil, invalidParam("logprobs", "logprobs must be between 0 and %d, got %d", maxCompletionLogprobs, *req.Logprobs)
	}
	prompt, err := promptText(req.Prompt)
	if err != nil {
		return nil, err
	}
	j := &job{model: m, prompt: m.text.Prompt(prompt, true), degrade: level, user: req.User}
	if len(j.prompt) == 0 {
		return nil, invalidParam("prompt", "prompt must not be empty")
	}
	if err := s.check(params{temperature: req.Temperature, topP: req.TopP, n: req.N, presence: req.PresencePenalty,
		freq: req.FrequencyPenalty, stop: req.Stop, seed: req.Seed, topK: req.TopK, minP: req.MinP,
		repetition: req.RepetitionPenalty, logitBias: req.LogitBias}, j); err != nil {
		return nil, err
	}
	if req.Logprobs != nil {
		j.logprobs, j.topLogprobs = true, *req.Logprobs
		if !j.model.info.Logprobs {
			return nil, invalidParam("logprobs", "model %s does not report logprobs (simulated models have no probabilities)", j.model.id)
		}
	}
	return j, fit(j, req.MaxTokens, defaultCompletionMaxTokens, "prompt")
}

// maxCompletionLogprobs is OpenAI's limit on the legacy logprobs.
const maxCompletionLogprobs = 5

// promptText reads the prompt of /v1/completions: a string or an array of
// one string.
func promptText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", invalidParam("prompt", "you must provide a prompt")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s == "" {
			return "", invalidParam("prompt", "prompt must not be empty")
		}
		return s, nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err != nil {
		return "", invalidParam("prompt", "prompt must be a string or an array of one string")
	}
	if len(ss) != 1 {
		return "", invalidParam("prompt", "prompt must hold exactly one string (batched prompts are not supported), got %d", len(ss))
	}
	if ss[0] == "" {
		return "", invalidParam("prompt", "prompt must not be empty")
	}
	return ss[0], nil
}

func (s *Server) handleNativeChat(w http.ResponseWriter, r *http.Request, rl *reqLog) {
	var req api.NativeChatRequest
	j, err := s.nativeJob(w, r, rl, &req)
	if err != nil {
		if s.serveRemote(w, r, rl, err, func(r2 *http.Request) { s.handleNativeChat(w, r2, rl) }) {
			return
		}
		rl.fail(writeError(w, rl.id, err), err)
		return
	}
	var em emitter
	if rl.stream {
		em = &nativeStream{sw: s.streamWriter(rl, true), id: rl.id, model: j.model.id}
	} else {
		em = newCollector(w, rl, j.n, func(texts []string, reasons []string, u engine.Usage) any {
			return api.NativeDone{ID: rl.id, Model: j.model.id, FinishReason: reasons[0], Usage: nativeUsage(u), Text: texts[0]}
		})
	}
	s.generate(w, r, rl, j, em)
}

// priorities maps the native priority names to engine classes.
var priorities = map[string]engine.Priority{
	"enterprise": engine.PriorityEnterprise,
	"paid":       engine.PriorityPaid,
	"free":       engine.PriorityFree,
	"batch":      engine.PriorityBatch,
}

func (s *Server) nativeJob(w http.ResponseWriter, r *http.Request, rl *reqLog, req *api.NativeChatRequest) (*job, error) {
	if err := s.decode(w, r, req); err != nil {
		return nil, err
	}
	rl.model, rl.stream = capHeader(req.Model, maxLoggedModelLen), req.Stream == nil || *req.Stream
	m, err := s.lookup(req.Model)
	if err != nil {
		return nil, err
	}
	m, level := s.degradedLookup(r, rl, m)
	if err := checkMaxTokens("max_tokens", req.MaxTokens); err != nil {
		return nil, err
	}
	if err := checkMessages(req.Messages); err != nil {
		return nil, err
	}
	prompt, err := m.text.ChatPrompt(req.Messages, true)
	if err != nil {
		return nil, err
	}
	j := &job{model: m, prompt: prompt, degrade: level}
	if err := s.check(params{temperature: req.Temperature, topP: req.TopP, stop: req.Stop, seed: req.Seed,
		topK: req.TopK, minP: req.MinP}, j); err != nil {
		return nil, err
	}
	if req.Priority != "" {
		p, ok := priorities[req.Priority]
		if !ok {
			return nil, invalidParam("priority", "priority must be one of enterprise, paid, free, batch; got %q", req.Priority)
		}
		j.requested = &p
	}
	return j, fit(j, req.MaxTokens, 0, "messages")
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request, _ *reqLog) {
	list := api.ModelList{Object: "list", Data: make([]api.Model, 0, len(s.models))}
	for _, m := range s.models {
		list.Data = append(list.Data, apiModel(m))
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request, _ *reqLog) {
	id := r.PathValue("id")
	if id == "" {
		id = "/" // an empty id is an unknown model, not a missing parameter
	}
	m, err := s.lookup(id)
	if err != nil {
		writeError(w, "", err)
		return
	}
	writeJSON(w, http.StatusOK, apiModel(m))
}

func apiModel(m *model) api.Model {
	return api.Model{ID: m.id, Object: "model", Created: m.created, OwnedBy: "llmd", MaxModelLen: m.limit,
		Architecture: m.arch, ParameterCount: m.params, Quantization: m.quantization}
}

type statusBody struct {
	Status string `json:"status"`
}

func (s *Server) handleHealthz(w http.ResponseWriter, _ *http.Request, _ *reqLog) {
	writeJSON(w, http.StatusOK, statusBody{Status: "ok"})
}

func (s *Server) handleReadyz(w http.ResponseWriter, _ *http.Request, _ *reqLog) {
	switch s.state.Load() {
	case stateReady:
		writeJSON(w, http.StatusOK, statusBody{Status: "ready"})
	case stateDraining:
		writeJSON(w, http.StatusServiceUnavailable, statusBody{Status: "draining"})
	default:
		writeJSON(w, http.StatusServiceUnavailable, statusBody{Status: "starting"})
	}
}

// tierNames names engine priorities on the wire, indexed by engine.Priority.
var tierNames = [engine.NumPriorities]string{"batch", "free", "paid", "enterprise"}

func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request, _ *reqLog) {
	resp := api.StatsResponse{Models: make([]api.EngineStats, 0, len(s.models))}
	for _, m := range s.models {
		resp.Models = append(resp.Models, apiEngineStats(m))
	}
	resp.Quota = s.quotaStats()
	writeJSON(w, http.StatusOK, resp)
}

// apiEngineStats is m's engine state on the wire.
func apiEngineStats(m *model) api.EngineStats {
	st := m.eng.Stats()
	byTier := make(map[string]int, len(tierNames))
	for p, name := range tierNames {
		byTier[name] = st.WaitingByPriority[p]
	}
	return api.EngineStats{
		Model: m.id, Executor: executorKind(m.id),
		BlocksTotal: st.BlocksTotal, BlocksUsed: st.BlocksUsed, BlocksCached: st.BlocksCached, BlockSize: st.BlockSize,
		Running: st.Running, Waiting: st.Waiting, WaitingByTier: byTier,
		Swapped: st.Swapped, SwapBlocksUsed: st.SwapBlocksUsed, SwapBlocksTotal: st.SwapBlocksTotal,
		Steps: st.Steps, Completed: st.Completed, GeneratedTokens: st.GeneratedTokens, ComputedTokens: st.ComputedTokens,
		PrefixQueryTokens: st.PrefixQueryTokens, PrefixHitTokens: st.PrefixHitTokens,
		Preemptions: st.Preemptions, PreemptionsSwap: st.PreemptionsSwap, PreemptionsRecompute: st.PreemptionsRecompute,
		Evictions: st.Evictions, Degrade: st.Degrade.String(), DegradeLevel: int(st.Degrade),
	}
}

func (s *Server) quotaStats() *api.QuotaStats {
	c := s.quota.Counters()
	return &api.QuotaStats{Allow: c.Allow, Deny: c.Deny, ErrorAllowed: c.ErrorAllowed, ErrorDenied: c.ErrorDenied,
		Resets: c.Resets, FallbackActive: c.FallbackActive, Backend: s.quotaBackend()}
}

// executorKind names the executor behind a model id: every simulated model
// id starts with "sim/".
func executorKind(id string) string {
	if strings.HasPrefix(id, "sim/") {
		return "simulated"
	}
	return "cpu"
}
