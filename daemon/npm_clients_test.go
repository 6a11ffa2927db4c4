package daemon

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// npmClientsScript drives llmd (at $LLMD) with the official npm clients,
// ollama and @anthropic-ai/sdk, and prints what they got as one JSON
// object.
const npmClientsScript = `
import { Ollama } from 'ollama';
import Anthropic from '@anthropic-ai/sdk';

const base = process.env.LLMD;
const out = {};
const ol = new Ollama({ host: base });
const messages = [{ role: 'user', content: 'Tell me about paged attention.' }];

let text = '', last = null, parts = 0;
for await (const part of await ol.chat({ model: 'sim/small:latest', messages, stream: true, options: { num_predict: 8 } })) {
  text += part.message.content; last = part; parts++;
}
out.ollamaStream = { text, parts, done: last.done, reason: last.done_reason, evalCount: last.eval_count,
  promptEvalCount: last.prompt_eval_count, totalDuration: last.total_duration };
const whole = await ol.chat({ model: 'sim/small:latest', messages, options: { num_predict: 8 } });
out.ollamaWhole = { text: whole.message.content, done: whole.done };
const gen = await ol.generate({ model: 'sim/small', prompt: 'Why is the sky blue?', options: { num_predict: 4 } });
out.ollamaGenerate = { text: gen.response, evalCount: gen.eval_count };
out.ollamaTags = (await ol.list()).models.map(m => m.name);
out.ollamaPS = (await ol.ps()).models.map(m => m.name);
out.ollamaShow = (await ol.show({ model: 'sim/small' })).parameters;
try { await ol.chat({ model: 'nope', messages }); } catch (e) { out.ollamaError = { message: e.message, status: e.status_code }; }

const an = new Anthropic({ baseURL: base, apiKey: 'unused', maxRetries: 0 });
const params = { model: 'sim/small', max_tokens: 8, system: 'You are terse.', messages };
const msg = await an.messages.create(params);
out.anthropicWhole = { id: msg.id, text: msg.content[0].text, stop: msg.stop_reason, usage: msg.usage };
let streamed = '';
const events = [];
const stream = an.messages.stream(params);
stream.on('text', t => { streamed += t; });
stream.on('streamEvent', e => { events.push(e.type); });
const final = await stream.finalMessage();
out.anthropicStream = { text: streamed, final: final.content[0].text, stop: final.stop_reason, events,
  outputTokens: final.usage.output_tokens };
out.anthropicCount = (await an.messages.countTokens({ model: 'sim/small', system: 'You are terse.', messages })).input_tokens;
try { await an.messages.create({ ...params, model: 'nope' }); } catch (e) {
  out.anthropicError = { status: e.status, type: e.error?.error?.type };
}
console.log(JSON.stringify(out));
`

// npmInstall installs the official clients into a temporary directory,
// or skips the test: no node or npm, or no registry.
func npmInstall(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the npm client test needs Node.js and npm", tool)
		}
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"private":true,"type":"module"}`), 0o644))
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "ollama@0.6.4", "@anthropic-ai/sdk@1.15.0")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("npm install ollama @anthropic-ai/sdk failed (is the npm registry reachable?): %v\n%s", err, out)
	}
	return dir
}

// TestNPMClients runs the official ollama and @anthropic-ai/sdk npm
// packages against a real llmd: streamed and whole chats, generate,
// the model listings, count_tokens and errors.
func TestNPMClients(t *testing.T) {
	if testing.Short() {
		t.Skip("installs npm packages")
	}
	dir := npmInstall(t)
	_, base := startSim(t, nil)
	script := filepath.Join(dir, "clients.mjs")
	require.NoError(t, os.WriteFile(script, []byte(npmClientsScript), 0o644))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LLMD="+base)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	require.NoError(t, err, "node: %s", stderr.String())

	var out struct {
		OllamaStream struct {
			Text                       string
			Parts                      int
			Done                       bool
			Reason                     string
			EvalCount, PromptEvalCount int
			TotalDuration              int64
		}
		OllamaWhole struct {
			Text string
			Done bool
		}
		OllamaGenerate struct {
			Text      string
			EvalCount int
		}
		OllamaTags, OllamaPS []string
		OllamaShow           string
		OllamaError          struct {
			Message string
			Status  int
		}
		AnthropicWhole struct {
			ID, Text, Stop string
			Usage          struct {
				InputTokens          int `json:"input_tokens"`
				OutputTokens         int `json:"output_tokens"`
				CacheReadInputTokens int `json:"cache_read_input_tokens"`
			}
		}
		AnthropicStream struct {
			Text, Final, Stop string
			Events            []string
			OutputTokens      int
		}
		AnthropicCount int
		AnthropicError struct {
			Status int
			Type   string
		}
	}
	require.NoError(t, json.Unmarshal(stdout, &out), "%s", stdout)

	st := out.OllamaStream
	assert.NotEmpty(t, st.Text)
	assert.Equal(t, 9, st.Parts, "8 tokens, then the final object")
	assert.True(t, st.Done)
	assert.Equal(t, "length", st.Reason)
	assert.Equal(t, 8, st.EvalCount)
	assert.Positive(t, st.PromptEvalCount)
	assert.Positive(t, st.TotalDuration)
	assert.Equal(t, st.Text, out.OllamaWhole.Text)
	assert.True(t, out.OllamaWhole.Done)
	assert.NotEmpty(t, out.OllamaGenerate.Text)
	assert.Equal(t, 4, out.OllamaGenerate.EvalCount)
	assert.Equal(t, []string{"sim/small:latest"}, out.OllamaTags)
	assert.Equal(t, []string{"sim/small:latest"}, out.OllamaPS)
	assert.Contains(t, out.OllamaShow, "num_ctx")
	assert.Equal(t, 404, out.OllamaError.Status)
	assert.Contains(t, out.OllamaError.Message, `model "nope" not found`)

	aw := out.AnthropicWhole
	assert.True(t, strings.HasPrefix(aw.ID, "msg_"), aw.ID)
	assert.NotEmpty(t, aw.Text)
	assert.Equal(t, "max_tokens", aw.Stop)
	assert.Equal(t, 8, aw.Usage.OutputTokens)
	as := out.AnthropicStream
	assert.Equal(t, aw.Text, as.Text)
	assert.Equal(t, aw.Text, as.Final)
	assert.Equal(t, "max_tokens", as.Stop)
	assert.Equal(t, 8, as.OutputTokens)
	require.NotEmpty(t, as.Events)
	assert.Equal(t, "message_start", as.Events[0])
	assert.Equal(t, "message_stop", as.Events[len(as.Events)-1])
	assert.Equal(t, aw.Usage.InputTokens+aw.Usage.CacheReadInputTokens, out.AnthropicCount)
	assert.Equal(t, 404, out.AnthropicError.Status)
	assert.Equal(t, "not_found_error", out.AnthropicError.Type)
}
