package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/pipeline"
)

// badRequest is one invalid request and the error it must get.
type badRequest struct {
	name, path, body string
	status           int
	param, code      any // string or nil
}

// badRequests returns the table of invalid requests for a server serving
// model with the given context length and body limit. longText must
// tokenize to more tokens than the context holds, within the body limit.
func badRequests(model string, contextLength int, maxBody int64, longText string) []badRequest {
	chat := func(extra string) string {
		return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]%s}`, model, extra)
	}
	compl := func(extra string) string { return fmt.Sprintf(`{"model":%q%s}`, model, extra) }
	const cc, co, na = "/v1/chat/completions", "/v1/completions", "/v1/chat"
	return []badRequest{
		{name: "malformed json", path: cc, body: `{"model":`, status: 400},
		{name: "not json", path: cc, body: `hello`, status: 400},
		{name: "empty body", path: cc, body: ``, status: 400},
		{name: "array body", path: cc, body: `[1,2]`, status: 400},
		{name: "trailing data", path: cc, body: chat("") + ` {}`, status: 400},
		{name: "messages wrong type", path: cc, body: fmt.Sprintf(`{"model":%q,"messages":"hi"}`, model), status: 400, param: "messages"},
		{name: "max_tokens float", path: cc, body: chat(`,"max_tokens":1.5`), status: 400, param: "max_tokens"},
		{name: "max_tokens huge", path: cc, body: chat(`,"max_tokens":1e30`), status: 400, param: "max_tokens"},
		{name: "max_tokens string", path: cc, body: chat(`,"max_tokens":"10"`), status: 400, param: "max_tokens"},
		{name: "model missing", path: cc, body: `{"messages":[{"role":"user","content":"hi"}]}`, status: 400, param: "model"},
		{name: "unknown model", path: cc, body: `{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}`,
			status: 404, param: "model", code: pipeline.CodeModelNotFound},
		{name: "no messages", path: cc, body: fmt.Sprintf(`{"model":%q,"messages":[]}`, model), status: 400, param: "messages"},
		{name: "bad role", path: cc, body: fmt.Sprintf(`{"model":%q,"messages":[{"role":"wizard","content":"hi"}]}`, model),
			status: 400, param: "messages[0].role"},
		{name: "image part", path: cc, body: fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, model),
			status: 400},
		{name: "max_tokens zero", path: cc, body: chat(`,"max_tokens":0`), status: 400, param: "max_tokens"},
		{name: "max_tokens negative", path: cc, body: chat(`,"max_tokens":-5`), status: 400, param: "max_tokens"},
		{name: "max_completion_tokens wins", path: cc, body: chat(`,"max_tokens":5,"max_completion_tokens":0`), status: 400,
			param: "max_completion_tokens"},
		{name: "temperature negative", path: cc, body: chat(`,"temperature":-0.1`), status: 400, param: "temperature"},
		{name: "temperature high", path: cc, body: chat(`,"temperature":2.5`), status: 400, param: "temperature"},
		{name: "top_p zero", path: cc, body: chat(`,"top_p":0`), status: 400, param: "top_p"},
		{name: "top_p high", path: cc, body: chat(`,"top_p":1.01`), status: 400, param: "top_p"},
		{name: "n zero", path: cc, body: chat(`,"n":0`), status: 400, param: "n"},
		{name: "n over limit", path: cc, body: chat(`,"n":1000000`), status: 400, param: "n"},
		{name: "presence penalty", path: cc, body: chat(`,"presence_penalty":3`), status: 400, param: "presence_penalty"},
		{name: "frequency penalty", path: cc, body: chat(`,"frequency_penalty":-2.5`), status: 400, param: "frequency_penalty"},
		{name: "top_k negative", path: cc, body: chat(`,"top_k":-2`), status: 400, param: "top_k"},
		{name: "min_p high", path: cc, body: chat(`,"min_p":1.5`), status: 400, param: "min_p"},
		{name: "repetition penalty zero", path: cc, body: chat(`,"repetition_penalty":0`), status: 400, param: "repetition_penalty"},
		{name: "logit_bias key not an id", path: cc, body: chat(`,"logit_bias":{"abc":1}`), status: 400, param: "logit_bias"},
		{name: "logit_bias id past vocab", path: cc, body: chat(`,"logit_bias":{"2000000000":1}`), status: 400, param: "logit_bias"},
		{name: "logit_bias value high", path: cc, body: chat(`,"logit_bias":{"5":101}`), status: 400, param: "logit_bias"},
		{name: "completion logprobs", path: co, body: compl(`,"prompt":"hi","logprobs":2`), status: 400, param: "logprobs"},
		{name: "completion top_k negative", path: co, body: compl(`,"prompt":"hi","top_k":-7`), status: 400, param: "top_k"},
		{name: "native min_p negative", path: na, body: chat(`,"min_p":-0.5`), status: 400, param: "min_p"},
		{name: "five stops", path: cc, body: chat(`,"stop":["a","b","c","d","e"]`), status: 400, param: "stop"},
		{name: "stop wrong type", path: cc, body: chat(`,"stop":5`), status: 400},
		{name: "max_tokens over context", path: cc, body: chat(fmt.Sprintf(`,"max_tokens":%d`, contextLength)),
			status: 400, param: "messages", code: pipeline.CodeContextLength},
		{name: "prompt over context", path: cc,
			body:   fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, model, longText),
			status: 400, param: "messages", code: pipeline.CodeContextLength},
		{name: "prompt over context stream", path: cc,
			body:   fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":%q}]}`, model, longText),
			status: 400, param: "messages", code: pipeline.CodeContextLength},
		{name: "body too large", path: cc,
			body:   fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, model, strings.Repeat("a", int(maxBody))),
			status: http.StatusRequestEntityTooLarge, code: "request_too_large"},

		{name: "completions no prompt", path: co, body: compl(``), status: 400, param: "prompt"},
		{name: "completions empty prompt", path: co, body: compl(`,"prompt":""`), status: 400, param: "prompt"},
		{name: "completions two prompts", path: co, body: compl(`,"prompt":["a","b"]`), status: 400, param: "prompt"},
		{name: "completions token prompt past vocab", path: co, body: compl(`,"prompt":[1,2000000000]`), status: 400, param: "prompt"},
		{name: "completions token prompt negative", path: co, body: compl(`,"prompt":[1,-2]`), status: 400, param: "prompt"},
		{name: "completions token prompt fraction", path: co, body: compl(`,"prompt":[1,2.5]`), status: 400, param: "prompt"},
		{name: "completions two token prompts", path: co, body: compl(`,"prompt":[[1],[2]]`), status: 400, param: "prompt"},
		{name: "completions empty token prompt", path: co, body: compl(`,"prompt":[[]]`), status: 400, param: "prompt"},
		{name: "completions max_tokens zero", path: co, body: compl(`,"prompt":"a","max_tokens":0`), status: 400, param: "max_tokens"},
		{name: "completions over context", path: co, body: compl(fmt.Sprintf(`,"prompt":"a","max_tokens":%d`, contextLength)),
			status: 400, param: "prompt", code: pipeline.CodeContextLength},
		{name: "completions unknown model", path: co, body: `{"model":"nope","prompt":"a"}`, status: 404, param: "model",
			code: pipeline.CodeModelNotFound},

		{name: "native bad priority", path: na, body: chat(`,"priority":"vip"`), status: 400, param: "priority"},
		{name: "native no messages", path: na, body: fmt.Sprintf(`{"model":%q}`, model), status: 400, param: "messages"},
		{name: "native unknown model", path: na, body: `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`,
			status: 404, param: "model", code: pipeline.CodeModelNotFound},
		{name: "native temperature", path: na, body: chat(`,"temperature":-1`), status: 400, param: "temperature"},

		// No field is silently ignored (issue 19).
		{name: "unknown field", path: cc, body: chat(`,"max_token":5`), status: 400, param: "max_token"},
		{name: "legacy functions", path: cc, body: chat(`,"functions":[]`), status: 400, param: "functions"},
		{name: "reasoning effort", path: cc, body: chat(`,"reasoning_effort":"high"`), status: 400, param: "reasoning_effort"},
		{name: "completions suffix", path: co, body: compl(`,"prompt":"a","suffix":"b"`), status: 400, param: "suffix"},
		{name: "native unknown field", path: na, body: chat(`,"temprature":1`), status: 400, param: "temprature"},
		{name: "unknown stream option", path: cc, body: chat(`,"stream":true,"stream_options":{"continuous_usage_stats":true}`), status: 400},
		{name: "unknown response_format field", path: cc, body: chat(`,"response_format":{"type":"json_object","strict":true}`), status: 400},
		{name: "response_format type", path: cc, body: chat(`,"response_format":{"type":"yaml"}`), status: 400, param: "response_format"},
		{name: "json_schema without schema", path: cc, body: chat(`,"response_format":{"type":"json_schema","json_schema":{"name":"x"}}`),
			status: 400, param: "response_format"},
		{name: "unsupported schema keyword", path: cc,
			body:   chat(`,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","patternProperties":{"a":{}}}}}`),
			status: 400, param: "response_format"},
		{name: "bad grammar", path: cc, body: chat(`,"grammar":"root ::= (\"a\""`), status: 400, param: "grammar"},
		{name: "bad regex", path: cc, body: chat(`,"guided_regex":"(a"`), status: 400, param: "guided_regex"},
		{name: "empty guided_choice", path: cc, body: chat(`,"guided_choice":[]`), status: 400, param: "guided_choice"},
		{name: "two structured fields", path: cc, body: chat(`,"response_format":{"type":"json_object"},"guided_regex":"a+"`),
			status: 400, param: "guided_regex"},
		{name: "best_of over n", path: cc, body: chat(`,"best_of":3`), status: 400, param: "best_of"},
		{name: "min_tokens over max_tokens", path: cc, body: chat(`,"min_tokens":9,"max_tokens":4`), status: 400, param: "min_tokens"},
		{name: "min_tokens negative", path: cc, body: chat(`,"min_tokens":-1`), status: 400, param: "min_tokens"},
		{name: "stop_token_ids past vocab", path: cc, body: chat(`,"stop_token_ids":[2000000000]`), status: 400, param: "stop_token_ids"},
		{name: "echo with logprobs", path: co, body: compl(`,"prompt":"a","echo":true,"logprobs":1`), status: 400, param: "echo"},
		{name: "completions tools", path: co, body: compl(`,"prompt":"a","tools":[]`), status: 400, param: "tools"},
	}
}

// checkBadRequest sends tc and checks its status and OpenAI error body.
func checkBadRequest(t *testing.T, c *http.Client, base string, tc badRequest) {
	t.Helper()
	resp, body := post(t, c, base+tc.path, tc.body)
	require.Equal(t, tc.status, resp.StatusCode, "%s", body)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	e := errorOf(t, body)
	require.Equal(t, "invalid_request_error", e["type"])
	require.Equal(t, tc.param, e["param"], "param; message %q", e["message"])
	require.Equal(t, tc.code, e["code"], "code; message %q", e["message"])
	if tc.code == pipeline.CodeContextLength {
		require.Contains(t, e["message"], "maximum context length is")
	}
}
