package chat

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/internal/fixtures"
	"github.com/llmd/llmd/model/gguf"
)

func tmplTestTemplate(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "templates", name))
	require.NoError(t, err)
	return string(b)
}

var tmplTestConversation = []Message{
	{Role: "system", Content: "You are terse."},
	{Role: "user", Content: "Hello!"},
}

// The expected prompts were rendered with Python's jinja2 3.1 in the
// sandboxed environment Hugging Face uses (trim_blocks, lstrip_blocks).
func TestTemplateRenderRealTemplates(t *testing.T) {
	t.Parallel()
	const tools = `[{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
		"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]`
	tests := map[string]struct {
		file string
		bos  string
		req  Request
		want string
	}{
		"llama3": {
			file: "llama3.jinja",
			bos:  "<|begin_of_text|>",
			req:  Request{Messages: tmplTestConversation, AddGenerationPrompt: true},
			want: "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		},
		"qwen3": {
			file: "qwen3.jinja",
			req:  Request{Messages: tmplTestConversation, AddGenerationPrompt: true},
			want: "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
		},
		"qwen3 tools keep their key order": {
			file: "qwen3.jinja",
			req:  Request{Messages: tmplTestConversation, Tools: json.RawMessage(tools), AddGenerationPrompt: true},
			want: "<|im_start|>system\nYou are terse.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
				"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
				`{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.", ` +
				`"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}` +
				"\n</tools>\n\nFor each function call, return a json object with function name and arguments within " +
				"<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n" +
				"</tool_call><|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
		},
		"qwen3 assistant turn without generation prompt": {
			file: "qwen3.jinja",
			req: Request{Messages: append(append([]Message{}, tmplTestConversation...),
				Message{Role: "assistant", Content: "<think>\nok\n</think>\n\nHi."})},
			want: "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n" +
				"<|im_start|>assistant\n<think>\nok\n</think>\n\nHi.<|im_end|>\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ct, err := NewTemplate(tmplTestTemplate(t, tc.file), Options{BOS: tc.bos, Fallback: FallbackChatML, Timeout: time.Minute})
			require.NoError(t, err)
			require.NoError(t, ct.Err())
			require.Equal(t, SourceGGUF, ct.Source())

			res, err := ct.RenderRequest(tc.req)
			require.NoError(t, err)
			require.Equal(t, tc.want, res.Prompt)
			require.Equal(t, SourceGGUF, res.Source)
			require.NoError(t, res.FallbackReason)
		})
	}
}

func TestTemplateFallbackFormats(t *testing.T) {
	t.Parallel()
	msgs := []Message{{Role: "system", Content: " Be brief. "}, {Role: "user", Content: "Hi"}}
	tests := map[string]struct {
		format string
		addGen bool
		want   string
	}{
		"llama3": {FallbackLlama3, true, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>" +
			"<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		"llama3 without generation prompt": {FallbackLlama3, false, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" +
			"Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"},
		"chatml":                          {FallbackChatML, true, "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
		"plain":                           {FallbackPlain, true, "system:  Be brief. \nuser: Hi\nassistant:"},
		"plain without generation prompt": {FallbackPlain, false, "system:  Be brief. \nuser: Hi\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ct, err := NewTemplate("", Options{Fallback: tc.format})
			require.NoError(t, err)
			require.Equal(t, tc.format, ct.Source())
			require.ErrorIs(t, ct.Err(), ErrNoTemplate)

			res, err := ct.RenderRequest(Request{Messages: msgs, AddGenerationPrompt: tc.addGen})
			require.NoError(t, err)
			require.Equal(t, tc.want, res.Prompt)
			require.Equal(t, tc.format, res.Source)
			require.ErrorIs(t, res.FallbackReason, ErrNoTemplate)
		})
	}
}

func TestTemplateFallsBack(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		src       string
		compiles  bool  // Source is "gguf" and the failure happens at render time
		reasonIs  error // nil: any reason
		wantInErr string
	}{
		"empty":                    {src: "", reasonIs: ErrNoTemplate},
		"syntax error":             {src: "{% if messages %}unclosed"},
		"unknown statement":        {src: "{% do messages.append(1) %}", reasonIs: ErrUnsupported},
		"unclosed tag":             {src: "{{ messages", reasonIs: ErrUnsupported},
		"unknown filter at render": {src: "{{ messages|no_such_filter }}", compiles: true, wantInErr: "no_such_filter"},
		"calling an undefined":     {src: "{% for m in messages %}{{ m.content.nope() }}{% endfor %}", compiles: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ct, err := NewTemplate(tc.src, Options{Fallback: FallbackChatML, Timeout: time.Minute})
			require.NoError(t, err)
			if tc.compiles {
				require.Equal(t, SourceGGUF, ct.Source())
			} else {
				require.Equal(t, FallbackChatML, ct.Source())
				require.Error(t, ct.Err())
			}

			res, err := ct.RenderRequest(Request{Messages: tmplTestConversation, AddGenerationPrompt: true})
			require.NoError(t, err)
			require.Equal(t, FallbackChatML, res.Source)
			require.Equal(t, tmplFallback(FallbackChatML, tmplTestConversation, true), res.Prompt)
			require.Error(t, res.FallbackReason)
			if tc.reasonIs != nil {
				require.ErrorIs(t, res.FallbackReason, tc.reasonIs)
			}
			require.Contains(t, res.FallbackReason.Error(), tc.wantInErr)
			require.True(t, strings.HasPrefix(res.FallbackReason.Error(), "model: "), res.FallbackReason.Error())
		})
	}
}

func TestTemplateRaiseException(t *testing.T) {
	t.Parallel()
	const src = `{% for m in messages %}{% if m.role == 'system' and not loop.first %}` +
		`{{ raise_exception('System message must be first, got it at ' ~ loop.index0) }}{% endif %}{{ m.content }}{% endfor %}`
	ct, err := NewTemplate(src, Options{Fallback: FallbackChatML, Timeout: time.Minute})
	require.NoError(t, err)

	out, err := ct.Render(tmplTestConversation, true)
	require.NoError(t, err)
	require.Equal(t, "You are terse.Hello!", out)

	_, err = ct.Render([]Message{{Role: "user", Content: "a"}, {Role: "system", Content: "b"}}, true)
	var exc *ExceptionError
	require.ErrorAs(t, err, &exc)
	require.Equal(t, "System message must be first, got it at 1", exc.Message)
	require.EqualError(t, err, "model: chat template rejected the conversation: System message must be first, got it at 1")
}

func TestTemplateOutputLimit(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		src  string
		msgs []Message
	}{
		"prompt over the limit": {src: "{% for i in range(200) %}0123456789{% endfor %}", msgs: tmplTestConversation},
		"template that writes far more than it prints": {
			src:  "{% for i in range(10000) %}{% set s %}{{ messages }}0123456789{% endset %}{% endfor %}",
			msgs: tmplTestConversation,
		},
		"conversation over the limit": {src: "{{ 'x' }}", msgs: []Message{{Role: "user", Content: strings.Repeat("y", 1001)}}},
		"fallback over the limit":     {src: "", msgs: []Message{{Role: "user", Content: strings.Repeat("y", 990)}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ct, err := NewTemplate(tc.src, Options{MaxOutputBytes: 1000, Fallback: FallbackChatML, Timeout: time.Minute})
			require.NoError(t, err)
			_, err = ct.Render(tc.msgs, true)
			require.ErrorIs(t, err, ErrOutputTooLarge)
		})
	}

	ct, err := NewTemplate("{% for i in range(100) %}0123456789{% endfor %}", Options{MaxOutputBytes: 1000, Timeout: time.Minute})
	require.NoError(t, err)
	out, err := ct.Render(nil, false)
	require.NoError(t, err, "exactly at the limit")
	require.Len(t, out, 1000)
}

func TestTemplateStrftimeNow(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 7, 6, 21, 5, 3, 0, time.UTC)
	tests := map[string]string{
		"{{ strftime_now('%d %b %Y') }}":                "06 Jul 2024",
		"{{ strftime_now('%Y-%m-%d %H:%M:%S') }}":       "2024-07-06 21:05:03",
		"{{ strftime_now('%A %B %-d, %I:%M %p') }}":     "Saturday July 6, 09:05 PM",
		"{{ strftime_now('%a %e %j %y %% %Q') }}":       "Sat  6 188 24 % %Q",
		"{{ strftime_now() }}":                          "2024-07-06",
		"{% set d = strftime_now('%d %B') %}[{{ d }}]":  "[06 July]",
		"{{ strftime_now('%z %Z') }}":                   "+0000 UTC",
		"{{ strftime_now('trailing %') }}":              "trailing %",
		"{{ strftime_now('%d' ~ ' ' ~ '%m') | upper }}": "06 07",
	}
	for src, want := range tests {
		t.Run(src, func(t *testing.T) {
			t.Parallel()
			ct, err := NewTemplate(src, Options{Now: func() time.Time { return now }, Timeout: time.Minute})
			require.NoError(t, err)
			res, err := ct.RenderRequest(Request{})
			require.NoError(t, err)
			require.Equal(t, SourceGGUF, res.Source, "%v", res.FallbackReason)
			require.Equal(t, want, res.Prompt)
		})
	}
}

func TestTemplateOptions(t *testing.T) {
	t.Parallel()
	_, err := NewTemplate("", Options{Fallback: "alpaca"})
	require.ErrorContains(t, err, `unknown chat template fallback "alpaca"`)
	_, err = NewTemplate("", Options{MaxOutputBytes: -1})
	require.Error(t, err)
	_, err = NewTemplate("", Options{Timeout: -time.Second})
	require.Error(t, err)

	ct, err := NewTemplate("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools is none }}",
		Options{BOS: "<s>", EOS: "</s>", Timeout: time.Minute})
	require.NoError(t, err)
	require.Equal(t, SourceGGUF, ct.Source())
	out, err := ct.Render(nil, true)
	require.NoError(t, err)
	require.Equal(t, "<s>|</s>|True|True", out)

	_, err = ct.RenderRequest(Request{Tools: json.RawMessage(`{"not": "an array"}`)})
	require.NoError(t, err, "bad tools make the template fail, so Render falls back")
	res, err := ct.RenderRequest(Request{Tools: json.RawMessage(`{"not": "an array"}`)})
	require.NoError(t, err)
	require.Equal(t, FallbackPlain, res.Source)
	require.ErrorContains(t, res.FallbackReason, "tools must be a JSON array")
}

func TestTemplateFallbackFor(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		vocab []string
		want  string
	}{
		"llama3":             {[]string{"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}, FallbackLlama3},
		"chatml":             {[]string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}, FallbackChatML},
		"both prefer llama3": {[]string{"<|im_start|>", "<|im_end|>", "<|start_header_id|>", "<|eot_id|>"}, FallbackLlama3},
		"half of llama3":     {[]string{"<|start_header_id|>"}, FallbackPlain},
		"half of chatml":     {[]string{"<|im_start|>"}, FallbackPlain},
		"sentencepiece":      {[]string{"<s>", "</s>", "<unk>"}, FallbackPlain},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, FallbackFor(func(piece string) bool {
				for _, v := range tc.vocab {
					if v == piece {
						return true
					}
				}
				return false
			}))
		})
	}
}

// The library has no file access: it does not even parse include, import,
// extends or from. NewTemplate rejects them before compiling.
func TestTemplateCannotReadFiles(t *testing.T) {
	t.Parallel()
	secret := filepath.Join(t.TempDir(), "secret.txt")
	require.NoError(t, os.WriteFile(secret, []byte("TOP-SECRET-CONTENT"), 0o600))

	for _, path := range []string{"/etc/passwd", secret} {
		for _, src := range []string{
			"{% include '" + path + "' %}",
			"{% import '" + path + "' as m %}{{ m.x }}",
			"{% from '" + path + "' import x %}{{ x }}",
			"{% extends '" + path + "' %}",
		} {
			t.Run(src, func(t *testing.T) {
				t.Parallel()
				_, err := jinja.Compile(src)
				require.ErrorContains(t, err, "unknown statement", "the library itself refuses it")

				ct, err := NewTemplate(src, Options{Fallback: FallbackPlain})
				require.NoError(t, err)
				require.ErrorIs(t, ct.Err(), ErrUnsupported)
				require.ErrorContains(t, ct.Err(), "cannot read other files")
				out, err := ct.Render(tmplTestConversation, true)
				require.NoError(t, err)
				require.NotContains(t, out, "TOP-SECRET")
				require.NotContains(t, out, "root:")
				require.Equal(t, tmplFallback(FallbackPlain, tmplTestConversation, true), out)
			})
		}
	}
}

// Hostile templates: each must end quickly with the fallback (or an
// error), never crash the process, loop for long or exhaust memory. Many
// of these crash or hang the library without instrumentation (stack
// overflow, out of memory, a negative strings.Repeat count).
func TestTemplateHostile(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("(", 200) + "1" + strings.Repeat(")", 200)
	tests := map[string]struct {
		src     string
		reason  error // the fallback reason; nil: renders with the model's template
		errIs   error // Render's error instead of a fallback
		compile bool  // the template compiles (the limit is hit at render time)
	}{
		"huge nested ranges":          {src: "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", reason: ErrLimit, compile: true},
		"range past int64":            {src: "{{ range(-9223372036854775807, 9223372036854775807)|length }}", reason: ErrLimit, compile: true},
		"nested loops over a set":     {src: "{% set r = range(1000) %}{% for a in r %}{% for b in r %}{% for c in r %}{% endfor %}{% endfor %}{% endfor %}", reason: ErrLimit, compile: true},
		"loop over a long string":     {src: "{% set s = 'ab' * 500 %}{% for a in s %}{% for b in s %}{% for c in s %}{% endfor %}{% endfor %}{% endfor %}", reason: ErrLimit, compile: true},
		"self recursion":              {src: "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", reason: ErrLimit, compile: true},
		"mutual recursion":            {src: "{% macro a(n) %}{{ b(n) }}{% endmacro %}{% macro b(n) %}{{ a(n + 1) }}{% endmacro %}{{ a(0) }}", reason: ErrLimit, compile: true},
		"recursion via an alias":      {src: "{% macro m() %}{{ f() }}{% endmacro %}{% set f = m %}{{ m() }}", reason: ErrLimit, compile: true},
		"recursion via caller":        {src: "{% macro m() %}{% call m() %}x{% endcall %}{% endmacro %}{{ m() }}", reason: ErrLimit, compile: true},
		"namespace containing itself": {src: "{% set ns = namespace(a=1) %}{% set ns.x = ns %}{% set ns.y = ns %}{{ ns }}"},
		"list containing itself":      {src: "{% set l = [1] %}{{ l.append(l) }}{{ l.append(l) }}{{ l|length }}{{ l }}{{ l|tojson }}"},
		"dict containing itself":      {src: "{% set d = {'a': 1} %}{{ d.update({'self': d}) }}{{ d }}"},
		"loop dict stored and mutated": {
			src: "{% set ns = namespace() %}{% for x in [ns, ns, ns] %}{% set ns.l = loop %}{% endfor %}{{ ns|tojson }}",
		},
		"string doubling":       {src: "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}", reason: ErrLimit, compile: true},
		"list doubling":         {src: "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", reason: ErrLimit, compile: true},
		"append doubling":       {src: "{% set l = [1] %}{% for i in range(64) %}{{ l.append(l) }}{% endfor %}", reason: ErrLimit, compile: true},
		"macro argument growth": {src: "{% macro m(s, n) %}{% if n > 0 %}{{ m(s ~ s, n - 1) }}{% endif %}{% endmacro %}{{ m('x', 60) }}", reason: ErrLimit, compile: true},
		"block set doubling": {
			src:   "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set t %}{{ ns.s }}{{ ns.s }}{% endset %}{% set ns.s = t %}{% endfor %}",
			errIs: ErrOutputTooLarge, compile: true,
		},
		"deep nesting":            {src: "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}", reason: ErrLimit, compile: true},
		"string repeat":           {src: "{{ 'a' * 1000000000000 }}", reason: ErrLimit, compile: true},
		"computed string repeat":  {src: "{{ 'a' * (1000000 * 1000000) }}", reason: ErrLimit, compile: true},
		"negative string repeat":  {src: "[{{ 'a' * -1 }}]"},
		"join amplification":      {src: "{{ range(1000)|join('x' * 100000) }}", reason: ErrLimit, compile: true},
		"replace amplification":   {src: "{% set s = 'a' * 10000 %}{{ s.replace('', s) }}", reason: ErrLimit, compile: true},
		"replace filter":          {src: "{% set s = 'a' * 10000 %}{{ s|replace('a', s) }}", reason: ErrLimit, compile: true},
		"indent amplification":    {src: "{{ 'a\\nb'|indent(1000000000) }}", reason: ErrLimit, compile: true},
		"negative indent":         {src: "[{{ 'a\\nb'|indent(-5) }}]"},
		"format amplification":    {src: "{{ ('{0}' * 1000).format('y' * 100000) }}", reason: ErrLimit, compile: true},
		"huge slice bounds":       {src: "{{ 'é'[0:100000000000000] }}{{ [1, 2][-100000000000000:] }}{{ 'ab'[100000000000000:] }}"},
		"slice with a step":       {src: "{{ [1][0:100000000000:2] }}", reason: ErrUnsupported},
		"slice step from a value": {src: "{% set n = -1 %}{{ 'abc'[::n] }}", reason: ErrUnsupported},
		"tojson huge indent":      {src: "{{ messages|tojson(indent=1000000) }}", reason: ErrUnsupported},
		"recursive loop":          {src: "{% for m in messages recursive %}{{ loop(m) }}{% endfor %}", reason: ErrUnsupported},
		"reserved hook name":      {src: "{% set __llmd_out = 1 %}{{ messages }}", reason: ErrUnsupported},
		"deep parentheses":        {src: "{{ " + deep + " }}", reason: ErrUnsupported},
		"deep blocks":             {src: strings.Repeat("{% if true %}", 100) + "x" + strings.Repeat("{% endif %}", 100), reason: ErrUnsupported},
		"long concatenation":      {src: "{% set s = 'a' * 1000000 %}{{ s ~ s ~ s ~ s }}", reason: ErrLimit, compile: true},
		"many references":         {src: "{{ [" + strings.Repeat("messages, ", 100) + "]|upper }}", reason: ErrUnsupported},
		"huge source":             {src: "{# " + strings.Repeat("x", tmplMaxSourceBytes) + " #}", reason: ErrUnsupported},
		"too many tags":           {src: strings.Repeat("{#c#}", tmplMaxTags+1), reason: ErrUnsupported},
		"nested filter blocks":    {src: "{% filter upper %}{% filter lower %}x{% endfilter %}{% endfilter %}", reason: ErrUnsupported},
		"growing filter block":    {src: "{% filter tojson %}x{% endfilter %}", reason: ErrUnsupported},
		"sort of a huge list":     {src: "{{ range(100000)|list|sort|first }}", reason: ErrLimit, compile: true},
		"selectattr over chars":   {src: "{% set s = 'ab' * 20000 %}{{ s|list|select('gt', 'a')|list|length }}", reason: ErrLimit, compile: true},
		"output flood":            {src: "{% for i in range(90000) %}" + strings.Repeat("0123456789", 10) + "{% endfor %}", errIs: ErrOutputTooLarge, compile: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ct, err := NewTemplate(tc.src, Options{Fallback: FallbackChatML, Timeout: time.Minute})
			require.NoError(t, err)
			ct.maxSteps = 200_000 // a fifth of the default, to keep the test fast
			if tc.reason == nil || tc.compile {
				require.NoError(t, ct.Err())
			}
			start := time.Now()
			res, err := ct.RenderRequest(Request{Messages: tmplTestConversation})
			elapsed := time.Since(start)
			ct.renders.Wait()
			require.Less(t, elapsed, 20*time.Second)
			switch {
			case tc.errIs != nil:
				require.ErrorIs(t, err, tc.errIs)
			case tc.reason != nil:
				require.NoError(t, err)
				require.Equal(t, FallbackChatML, res.Source)
				require.ErrorIs(t, res.FallbackReason, tc.reason)
			default:
				require.NoError(t, err)
				require.Equal(t, SourceGGUF, res.Source, "%v", res.FallbackReason)
			}
		})
	}
}

// A render past its deadline falls back at once, and the render goroutine
// stops at its next loop iteration instead of running to the end.
func TestTemplateTimeoutStopsRender(t *testing.T) {
	t.Parallel()
	// 600,000 steps: under the step limit, far over a 1ms timeout.
	const src = "{% for a in range(300) %}{% for b in range(1000) %}{{ b }}{% endfor %}{% endfor %}"
	ct, err := NewTemplate(src, Options{Fallback: FallbackLlama3, Timeout: time.Millisecond, MaxOutputBytes: 64 << 20})
	require.NoError(t, err)
	require.NoError(t, ct.Err())

	start := time.Now()
	res, err := ct.RenderRequest(Request{Messages: tmplTestConversation, AddGenerationPrompt: true})
	require.NoError(t, err)
	require.Equal(t, FallbackLlama3, res.Source)
	require.ErrorIs(t, res.FallbackReason, ErrTimeout)
	require.Equal(t, tmplFallback(FallbackLlama3, tmplTestConversation, true), res.Prompt)

	stopped := make(chan struct{})
	go func() {
		ct.renders.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the render goroutine kept running after the timeout")
	}
	t.Logf("render stopped %v after it started", time.Since(start))

	// The same template renders when given the time.
	ct, err = NewTemplate(src, Options{Timeout: time.Minute, MaxOutputBytes: 64 << 20})
	require.NoError(t, err)
	res, err = ct.RenderRequest(Request{})
	require.NoError(t, err)
	require.Equal(t, SourceGGUF, res.Source)
	require.Len(t, res.Prompt, 300*(10+90*2+900*3))
}

func TestTemplateConcurrentRenders(t *testing.T) {
	t.Parallel()
	ct, err := NewTemplate(tmplTestTemplate(t, "qwen3.jinja"), Options{Timeout: time.Minute})
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			msgs := []Message{{Role: "user", Content: fmt.Sprint("question ", i)}}
			out, err := ct.Render(msgs, true)
			if err == nil && out != fmt.Sprintf("<|im_start|>user\nquestion %d<|im_end|>\n<|im_start|>assistant\n", i) {
				err = fmt.Errorf("render %d: got %q", i, out)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// FuzzChatTemplate renders arbitrary templates: NewTemplate and Render
// must not panic, hang or crash, whatever the template.
func FuzzChatTemplate(f *testing.F) {
	for _, name := range []string{"llama3.jinja", "qwen3.jinja", "llama3.1.jinja", "llama3.2.jinja", "mistral-v3.jinja"} {
		b, err := os.ReadFile(filepath.Join("testdata", "templates", name))
		require.NoError(f, err)
		f.Add(string(b))
	}
	for _, src := range []string{
		"{% if %}{% endif %}{% for %}{% endfor %}{{ }}{% set %}{% set x = %}",
		"{% macro m(a, b=[1, 2]) %}{{ m(a) }}{% endmacro %}{{ m(1) }}",
		"{% set ns = namespace(x=1) %}{% set ns.y = ns %}{{ ns.y.y }}{{ ns|tojson(indent=2) }}",
		"{{ 'a' * 3 ~ [1, 2][::-1]|string ~ x[1:2] }}{% raw %}{{ x }}{% endraw %}",
		"{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.content.replace('a', 'b').format(1) }}{% else %}-{% endfor %}",
		"{% call(x) m(1) %}{{ x }}{% endcall %}{% filter upper %}{{ range(3)|join(',') }}{% endfilter %}",
		"{{ raise_exception('no') }}{{ strftime_now('%d %b %Y') }}",
	} {
		f.Add(src)
	}
	f.Fuzz(func(t *testing.T, src string) {
		ct, err := NewTemplate(src, Options{Timeout: 5 * time.Second, MaxOutputBytes: 64 << 10, Fallback: FallbackChatML})
		require.NoError(t, err)
		ct.maxSteps = 20_000
		res, err := ct.RenderRequest(Request{Messages: tmplTestConversation, AddGenerationPrompt: true})
		stopped := make(chan struct{})
		go func() {
			ct.renders.Wait()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			t.Fatalf("the render did not stop")
		}
		if err == nil {
			require.LessOrEqual(t, len(res.Prompt), 64<<10)
			require.NotEmpty(t, res.Source)
		}
	})
}

// The templates in testdata are the ones in the llama.cpp-written fixtures,
// and the fixtures' vocabularies pick the matching fallback format.
func TestTemplateFixtures(t *testing.T) {
	t.Parallel()
	dir := fixtures.Dir(t)
	tests := map[string]struct {
		template string
		fallback string
	}{
		"llama3-bpe-d64-q8_0.gguf": {"llama3.jinja", FallbackLlama3},
		"qwen2-d64-q8_0.gguf":      {"qwen3.jinja", FallbackChatML},
		"llama-spm-d64-q8_0.gguf":  {"", FallbackPlain},
	}
	for file, tc := range tests {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			f, err := gguf.Open(filepath.Join(dir, file))
			require.NoError(t, err)
			defer f.Close()

			src, ok := f.String("tokenizer.chat_template")
			if tc.template == "" {
				require.False(t, ok)
			} else {
				require.True(t, ok)
				require.Equal(t, tmplTestTemplate(t, tc.template), src)
			}
			tokens, ok := f.Strings("tokenizer.ggml.tokens")
			require.True(t, ok)
			vocab := make(map[string]bool, len(tokens))
			for _, tok := range tokens {
				vocab[tok] = true
			}
			require.Equal(t, tc.fallback, FallbackFor(func(piece string) bool { return vocab[piece] }))

			ct, err := NewTemplate(src, Options{Fallback: tc.fallback, Timeout: time.Minute})
			require.NoError(t, err)
			res, err := ct.RenderRequest(Request{Messages: tmplTestConversation, AddGenerationPrompt: true})
			require.NoError(t, err)
			if tc.template != "" {
				require.Equal(t, SourceGGUF, res.Source)
			} else {
				require.Equal(t, "system: You are terse.\nuser: Hello!\nassistant:", res.Prompt)
			}
		})
	}
}
