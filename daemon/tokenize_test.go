package daemon

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

func TestSimTokenize(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	c := testClient(t)

	// The count for messages equals the prompt tokens a chat completion bills.
	msgs := `[{"role":"system","content":"Be brief."},{"role":"user","content":"What is a KV cache?"}]`
	resp, body := post(t, c, base+"/tokenize", `{"model":"sim/small","messages":`+msgs+`}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var tr api.TokenizeResponse
	require.NoError(t, json.Unmarshal(body, &tr))
	require.Equal(t, len(tr.Tokens), tr.Count)
	require.Equal(t, 32768, tr.MaxModelLen)
	resp, body = post(t, c, base+"/v1/chat/completions", `{"model":"sim/small","max_tokens":1,"messages":`+msgs+`}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var cc api.ChatCompletion
	require.NoError(t, json.Unmarshal(body, &cc))
	require.Equal(t, cc.Usage.PromptTokens, tr.Count)

	// Generated text round-trips through /tokenize and /detokenize. (The
	// simulated tokenizer hashes words outside its placeholder vocabulary,
	// so only text made of its own words decodes back exactly.)
	resp, body = post(t, c, base+"/v1/chat/completions", `{"model":"sim/small","max_tokens":40,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.NoError(t, json.Unmarshal(body, &cc))
	text := cc.Choices[0].Message.Content
	req, err := json.Marshal(api.TokenizeRequest{Model: "sim/small", Prompt: &text})
	require.NoError(t, err)
	resp, body = post(t, c, base+"/tokenize", string(req))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.NoError(t, json.Unmarshal(body, &tr))
	req, err = json.Marshal(api.DetokenizeRequest{Model: "sim/small", Tokens: tr.Tokens})
	require.NoError(t, err)
	resp, body = post(t, c, base+"/detokenize", string(req))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var dr api.DetokenizeResponse
	require.NoError(t, json.Unmarshal(body, &dr))
	require.Equal(t, text, dr.Prompt)
}

func TestSimTokenizeErrors(t *testing.T) {
	t.Parallel()
	_, base := startSim(t, nil)
	c := testClient(t)
	for name, tc := range map[string]struct {
		path, body string
		status     int
		param      string
	}{
		"unknown model":      {"/tokenize", `{"model":"sim/nope","prompt":"x"}`, http.StatusNotFound, "model"},
		"neither":            {"/tokenize", `{"model":"sim/small"}`, http.StatusBadRequest, "prompt"},
		"both":               {"/tokenize", `{"model":"sim/small","prompt":"x","messages":[{"role":"user","content":"y"}]}`, http.StatusBadRequest, "messages"},
		"bad role":           {"/tokenize", `{"model":"sim/small","messages":[{"role":"robot","content":"y"}]}`, http.StatusBadRequest, "messages[0].role"},
		"no tokens":          {"/detokenize", `{"model":"sim/small"}`, http.StatusBadRequest, "tokens"},
		"negative token":     {"/detokenize", `{"model":"sim/small","tokens":[1,-1]}`, http.StatusBadRequest, "tokens[1]"},
		"token past vocab":   {"/detokenize", `{"model":"sim/small","tokens":[2000000000]}`, http.StatusBadRequest, "tokens[0]"},
		"token not a number": {"/detokenize", `{"model":"sim/small","tokens":["a"]}`, http.StatusBadRequest, ""},
	} {
		t.Run(name, func(t *testing.T) {
			resp, body := post(t, c, base+tc.path, tc.body)
			require.Equal(t, tc.status, resp.StatusCode, string(body))
			e := errorOf(t, body)
			if tc.param != "" {
				require.Equal(t, tc.param, e["param"])
			}
		})
	}
	resp, _ := get(t, c, base+"/tokenize")
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}
