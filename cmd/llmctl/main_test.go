package main

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// fakeLLMD mimics llmd's wire format: GET /v1/models and a streamed
// POST /v1/chat with heartbeats.
type fakeLLMD struct {
	models []api.Model
	// reqs receives every chat request.
	reqs chan api.NativeChatRequest
	// reply writes the answer to a chat request; nil streams "Hello world".
	reply func(w http.ResponseWriter, r *http.Request, req api.NativeChatRequest)
}

func newFakeLLMD(t *testing.T, f *fakeLLMD) *httptest.Server {
	t.Helper()
	if f.models == nil {
		f.models = []api.Model{
			{ID: "sim/mid", Object: "model", OwnedBy: "llmd", MaxModelLen: 8192, Architecture: "sim", ParameterCount: 32_800_000_000, Quantization: "BF16"},
			{ID: "sim/small", Object: "model", OwnedBy: "llmd", MaxModelLen: 4096},
			{ID: "gguf/tiny", Object: "model", OwnedBy: "local", Architecture: "llama", ParameterCount: 4_194_624, Quantization: "Q8_0"},
		}
	}
	f.reqs = make(chan api.NativeChatRequest, 16)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(api.ModelList{Object: "list", Data: f.models})
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(api.StatsResponse{Models: []api.EngineStats{{
			Model: "sim/small", Executor: "simulated", BlocksTotal: 200, BlocksUsed: 50, BlocksCached: 10,
			Running: 3, Waiting: 2, Swapped: 1, Completed: 40, PrefixQueryTokens: 1000, PrefixHitTokens: 250,
			Preemptions: 5, PreemptionsSwap: 2, PreemptionsRecompute: 3, Degrade: "pause_batch", DegradeLevel: 1,
		}}, Quota: &api.QuotaStats{Backend: "redis", Allow: 90, Deny: 4, ErrorAllowed: 6, ErrorDenied: 1, FallbackActive: true}})
	})
	mux.HandleFunc("POST /v1/chat", func(w http.ResponseWriter, r *http.Request) {
		var req api.NativeChatRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.reqs <- req
		if f.reply != nil {
			f.reply(w, r, req)
			return
		}
		streamTokens(w, req.Model, "Hello", " world")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func startSSE(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_ = http.NewResponseController(w).Flush()
}

func writeSSE(w http.ResponseWriter, s string) {
	_, _ = io.WriteString(w, s)
	_ = http.NewResponseController(w).Flush()
}

func tokenEvent(n int, delta string) string {
	b, _ := json.Marshal(api.NativeDelta{Delta: delta})
	return fmt.Sprintf("id: %d\ndata: %s\n\n", n, b)
}

func doneEvent(model string, out int) string {
	b, _ := json.Marshal(api.NativeDone{ID: "req-1", Model: model, FinishReason: "stop",
		Usage: api.NativeUsage{InputTokens: 12, CachedTokens: 4, OutputTokens: out}})
	return "event: done\ndata: " + string(b) + "\n\n"
}

// streamTokens streams tokens as native events with heartbeats, then done.
func streamTokens(w http.ResponseWriter, model string, tokens ...string) {
	startSSE(w)
	writeSSE(w, ": ping\n\n")
	for i, tok := range tokens {
		writeSSE(w, tokenEvent(i+1, tok))
		writeSSE(w, ": ping\n\n")
	}
	writeSSE(w, doneEvent(model, len(tokens)))
}

func writeAPIError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{
		Message: message, Type: "invalid_request_error", Code: &code}})
}

// closedAddr returns a loopback host:port nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// runCmd runs the command tree built by newRootCmd on args with stdin and
// returns stdout, stderr and the error Execute returned.
func runCmd(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errOut)
	err := root.ExecuteContext(t.Context())
	return out.String(), errOut.String(), err
}

func TestModelsCmd(t *testing.T) {
	srv := newFakeLLMD(t, &fakeLLMD{})
	out, errOut, err := runCmd(t, "", "--addr", srv.URL, "models")
	require.NoError(t, err)
	require.Empty(t, errOut)
	require.Equal(t, ""+
		"ID          KIND   ARCH    PARAMS   QUANT   CONTEXT   OWNED BY\n"+
		"sim/mid     chat   sim     32.8B    BF16    8192      llmd\n"+
		"sim/small   chat   -       -        -       4096      llmd\n"+
		"gguf/tiny   chat   llama   4.2M     Q8_0    -         local\n", out)
}

func TestStatsCmd(t *testing.T) {
	srv := newFakeLLMD(t, &fakeLLMD{})
	out, errOut, err := runCmd(t, "", "--addr", srv.URL, "stats")
	require.NoError(t, err)
	require.Empty(t, errOut)
	require.Equal(t, ""+
		"MODEL      EXECUTOR   KV USED       CACHED  RUNNING  WAITING  SWAPPED  DONE  PREFIX HIT  PREEMPT (SWAP/RECOMP)  DEGRADE\n"+
		"sim/small  simulated  25.0% of 200  10      3        2        1        40    25.0%       5 (2/3)                pause_batch\n"+
		"\n"+
		"quota (redis): 90 allowed, 4 denied, 6 allowed and 1 denied by the fallback, 0 state resets "+
		"(Redis failing: local fallback active)\n", out)
}

func TestChatOneShot(t *testing.T) {
	tests := map[string]struct {
		stdin     string
		args      []string
		models    []api.Model
		wantModel string
		check     func(t *testing.T, req api.NativeChatRequest)
		wantOut   string
		wantErr   string // a regexp stderr must match; "" means empty
	}{
		"prompt from args, preferred model": {
			args:      []string{"chat", "why", "is", "the", "sky", "blue?"},
			wantModel: "sim/small",
			check: func(t *testing.T, req api.NativeChatRequest) {
				require.Equal(t, []api.Message{{Role: "user", Content: "why is the sky blue?"}}, req.Messages)
				require.Nil(t, req.MaxTokens)
				require.Nil(t, req.Temperature)
				require.Nil(t, req.Seed)
			},
			wantOut: "Hello world\n",
		},
		"prompt from stdin": {
			stdin:     "summarize this\nplease\n",
			args:      []string{"chat"},
			wantModel: "sim/small",
			check: func(t *testing.T, req api.NativeChatRequest) {
				require.Equal(t, []api.Message{{Role: "user", Content: "summarize this\nplease\n"}}, req.Messages)
			},
			wantOut: "Hello world\n",
		},
		"args win over stdin": {
			stdin:     "ignored",
			args:      []string{"chat", "hi"},
			wantModel: "sim/small",
			check: func(t *testing.T, req api.NativeChatRequest) {
				require.Equal(t, api.Content("hi"), req.Messages[0].Content)
			},
			wantOut: "Hello world\n",
		},
		"first model without sim/small": {
			args:      []string{"chat", "hi"},
			models:    []api.Model{{ID: "gguf/tiny"}, {ID: "sim/mid"}},
			wantModel: "gguf/tiny",
			wantOut:   "Hello world\n",
		},
		"flags": {
			args: []string{"chat", "-m", "sim/mid", "--max-tokens", "7", "--temperature", "0",
				"--seed", "42", "--system", "be terse", "hi"},
			wantModel: "sim/mid",
			check: func(t *testing.T, req api.NativeChatRequest) {
				require.Equal(t, []api.Message{{Role: "system", Content: "be terse"}, {Role: "user", Content: "hi"}}, req.Messages)
				require.Equal(t, 7, *req.MaxTokens)
				require.Equal(t, 0.0, *req.Temperature)
				require.Equal(t, int64(42), *req.Seed)
				require.NotNil(t, req.Stream)
				require.True(t, *req.Stream)
			},
			wantOut: "Hello world\n",
		},
		"verbose stats on stderr": {
			args:      []string{"chat", "-v", "hi"},
			wantModel: "sim/small",
			wantOut:   "Hello world\n",
			wantErr:   `^sim/small: 12 input tokens \(4 cached\), 2 output tokens, finish stop, first token \d+ms(, [\d.]+ tokens/s)?\n$`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := &fakeLLMD{models: tc.models}
			srv := newFakeLLMD(t, f)
			out, errOut, err := runCmd(t, tc.stdin, append([]string{"--addr", srv.URL}, tc.args...)...)
			require.NoError(t, err)
			require.Equal(t, tc.wantOut, out)
			if tc.wantErr == "" {
				require.Empty(t, errOut)
			} else {
				require.Regexp(t, tc.wantErr, errOut)
			}
			req := <-f.reqs
			require.Equal(t, tc.wantModel, req.Model)
			if tc.check != nil {
				tc.check(t, req)
			}
		})
	}
}

func TestChatOneShotErrors(t *testing.T) {
	tests := map[string]struct {
		reply   func(w http.ResponseWriter, r *http.Request, req api.NativeChatRequest)
		wantOut string
		wantErr string
	}{
		"unknown model": {
			reply: func(w http.ResponseWriter, r *http.Request, req api.NativeChatRequest) {
				writeAPIError(w, http.StatusNotFound, "model_not_found", fmt.Sprintf("model %q not found", req.Model))
			},
			wantErr: "llmctl: model \"nope\" not found\n",
		},
		"error mid-stream": {
			reply: func(w http.ResponseWriter, r *http.Request, req api.NativeChatRequest) {
				startSSE(w)
				writeSSE(w, tokenEvent(1, "Hel"))
				writeSSE(w, `event: error`+"\n"+`data: {"error": {"message": "executor failed", "type": "server_error", "param": null, "code": null}}`+"\n\n")
			},
			wantOut: "Hel\n",
			wantErr: "llmctl: executor failed\n",
		},
		"stream cut before done": {
			reply: func(w http.ResponseWriter, r *http.Request, req api.NativeChatRequest) {
				startSSE(w)
				writeSSE(w, tokenEvent(1, "Hel"))
				writeSSE(w, ": ping\n\n")
			},
			wantOut: "Hel\n",
			wantErr: "llmctl: api: stream ended before its final event\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := newFakeLLMD(t, &fakeLLMD{reply: tc.reply})
			var out, errOut bytes.Buffer
			code := execute(t.Context(), []string{"--addr", srv.URL, "chat", "-m", "nope", "hi"}, strings.NewReader(""), &out, &errOut)
			require.Equal(t, exitFailure, code)
			require.Equal(t, tc.wantOut, out.String())
			require.Equal(t, tc.wantErr, errOut.String())
		})
	}
}

func TestCannotReachLLMD(t *testing.T) {
	addr := closedAddr(t)
	for _, args := range [][]string{
		{"--addr", addr, "models"},
		{"--addr", "http://" + addr + "/", "chat", "hi"},
		{"--addr", addr, "chat", "-m", "sim/small", "hi"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := execute(t.Context(), args, strings.NewReader(""), &out, &errOut)
			require.Equal(t, exitFailure, code)
			require.Empty(t, out.String())
			require.Equal(t, "llmctl: cannot reach llmd at http://"+addr+
				": start it with \"make run\" or \"llmd\", or pass --addr\n", errOut.String())
		})
	}
}

func TestAddrFromEnv(t *testing.T) {
	srv := newFakeLLMD(t, &fakeLLMD{})
	t.Setenv("LLMD_ADDR", strings.TrimPrefix(srv.URL, "http://"))
	out, _, err := runCmd(t, "", "models")
	require.NoError(t, err)
	require.Contains(t, out, "sim/small")

	// --addr wins over the environment.
	addr := closedAddr(t)
	var errOut bytes.Buffer
	code := execute(t.Context(), []string{"--addr", addr, "models"}, strings.NewReader(""), io.Discard, &errOut)
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut.String(), addr)
}

func TestUsageErrors(t *testing.T) {
	tests := map[string]struct {
		args    []string
		stdin   string
		wantErr string
	}{
		"unknown command":  {args: []string{"modles"}, wantErr: "llmctl: unknown command \"modles\" for \"llmctl\"; did you mean \"models\"?\nRun 'llmctl --help' for usage.\n"},
		"unknown flag":     {args: []string{"chat", "--nope", "hi"}, wantErr: "llmctl: unknown flag: --nope\nRun 'llmctl chat --help' for usage.\n"},
		"bad flag value":   {args: []string{"chat", "--max-tokens", "many", "hi"}},
		"models with args": {args: []string{"models", "x"}, wantErr: "llmctl: unknown command \"x\" for \"llmctl models\"\nRun 'llmctl models --help' for usage.\n"},
		"empty prompt":     {args: []string{"chat"}, stdin: " \n", wantErr: "llmctl: empty prompt: give it as arguments or on stdin\nRun 'llmctl chat --help' for usage.\n"},
		"bad addr":         {args: []string{"--addr", "ftp://x", "models"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			// A closed address: usage errors come before any request.
			args := append([]string{"--addr", closedAddr(t)}, tc.args...)
			code := execute(t.Context(), args, strings.NewReader(tc.stdin), &out, &errOut)
			require.Equal(t, exitUsage, code, errOut.String())
			require.Empty(t, out.String())
			if tc.wantErr != "" {
				require.Equal(t, tc.wantErr, errOut.String())
			}
		})
	}
}

func TestNormalizeAddr(t *testing.T) {
	tests := map[string]struct {
		in, want string
		wantErr  bool
	}{
		"url":            {in: "http://127.0.0.1:8700", want: "http://127.0.0.1:8700"},
		"trailing slash": {in: "http://127.0.0.1:8700/", want: "http://127.0.0.1:8700"},
		"host:port":      {in: "localhost:9000", want: "http://localhost:9000"},
		"only port":      {in: ":9000", want: "http://127.0.0.1:9000"},
		"ipv6":           {in: "[::1]:9000", want: "http://[::1]:9000"},
		"https path":     {in: "https://llmd.example.com/api/", want: "https://llmd.example.com/api"},
		"empty":          {in: " ", wantErr: true},
		"bad scheme":     {in: "unix:///run/llmd.sock", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := normalizeAddr(tc.in)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestCACert: --ca-cert trusts a private CA for an https:// llmd; without
// it the certificate is refused; a file without a certificate is an error.
func TestCACert(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"sim/small","object":"model","owned_by":"llmd"}]}`)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))

	out, _, err := runCmd(t, "", "--addr", srv.URL, "--ca-cert", ca, "models")
	require.NoError(t, err)
	require.Contains(t, out, "sim/small")

	_, _, err = runCmd(t, "", "--addr", srv.URL, "models")
	require.Error(t, err, "an unknown CA is refused")

	bad := filepath.Join(dir, "bad.pem")
	require.NoError(t, os.WriteFile(bad, []byte("nothing"), 0o600))
	_, _, err = runCmd(t, "", "--addr", srv.URL, "--ca-cert", bad, "models")
	require.ErrorContains(t, err, "holds no PEM certificate")
}
