package chat

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"
	"github.com/stretchr/testify/require"
)

// tmplCompare renders src with the library as is and after instrumentation,
// with the same data, and returns both results ("error" on failure).
func tmplCompare(t *testing.T, src string, data map[string]jinja.Value) (raw, instrumented string) {
	t.Helper()
	render := func(src string, data map[string]jinja.Value) string {
		tmpl, err := jinja.Compile(src)
		if err != nil {
			return "error"
		}
		out, err := tmpl.RenderValues(data)
		if err != nil {
			return "error"
		}
		return out
	}
	raw = render(src, data)

	rewritten, err := tmplInstrument(src)
	if err != nil {
		return raw, "error"
	}
	r := newTmplRender(DefaultMaxOutputBytes, time.Date(2024, 7, 26, 9, 5, 3, 0, time.UTC))
	all := r.globals()
	for k, v := range data {
		all[k] = v
	}
	instrumented = render(rewritten, all)
	if r.err != nil {
		instrumented = "error"
	}
	return raw, instrumented
}

// tmplTestData is the render data of the differential tests: the variables
// of a chat request (decoded the way RenderRequest decodes tools) plus a few
// extras the snippets use.
func tmplTestData(t *testing.T, request string) map[string]jinja.Value {
	t.Helper()
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(request), &fields))
	data := map[string]jinja.Value{
		"add_generation_prompt": jinja.NewBool(true),
		"bos_token":             jinja.NewString("<s>"),
		"eos_token":             jinja.NewString("</s>"),
		"enable_thinking":       jinja.NewBool(false),
		"reasoning_effort":      jinja.NewString("medium"),
		"date_string":           jinja.NewString("26 Jul 2024"),
		"tools":                 jinja.None(),
		// Both renders use the same clock; strftime_now itself is tested
		// in TestTemplateStrftimeNow.
		"strftime_now": jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			return jinja.NewString(tmplStrftime(time.Date(2024, 7, 26, 9, 5, 3, 0, time.UTC), args[0].AsString())), nil
		}),
	}
	for _, key := range []string{"messages", "tools", "d", "l", "x"} {
		if raw, ok := fields[key]; ok {
			v, err := tmplToolsValue(json.RawMessage("[" + string(raw) + "]"))
			require.NoError(t, err)
			data[key] = v.AsList().Items[0]
		}
	}
	return data
}

// The instrumented template must render to the same bytes as the original:
// every rewrite is an identity wrapper or an equivalent bounded filter.
func TestTemplateInstrumentKeepsOutput(t *testing.T) {
	t.Parallel()
	const request = `{
		"messages": [
			{"role": "system", "content": "Be brief."},
			{"role": "user", "content": "héllo <tag> & \"quotes\"\n  indented"},
			{"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHi!"},
			{"role": "user", "content": "bye"}
		],
		"d": {"b": 2, "a": [1, 2.5, "x", null, true], "c": {"k": "v"}},
		"l": [{"a": "one", "n": 3}, {"a": "two", "n": 1}, {"a": "three", "n": 2}],
		"x": "  Mixed Case text, with {0} and {} braces  "
	}`
	data := tmplTestData(t, request)

	snippets := []string{
		`{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ -2 ** 2 }}|{{ 10 // 3 }}|{{ 10 % 3 }}|{{ 7 / 2 }}`,
		`{{ 'ab' * 3 }}|{{ 3 * 'ab' }}|{{ 'a' ~ 'b' * 2 }}|{{ 1.5 * 2 }}|{{ true * 3 }}|{{ 'x' * 0 }}|{{ [1] * 2 }}`,
		`{{ x[2:6] }}|{{ x[-5:] }}|{{ x[:3] }}|{{ x[::-1] }}|{{ l[1:] }}|{{ l[::-1]|map(attribute='a')|join(',') }}|{{ 'héllo'[1:3] }}|{{ x[1] }}|{{ x[-1] }}`,
		`{{ not 'a' in 'abc' }}|{{ 'a' not in 'abc' }}|{{ 1 if false else 2 if true else 3 }}|{{ 'y' if x }}|{{ x is string }}|{{ d is not mapping }}|{{ d.a is defined and d.zz is undefined }}`,
		`{{ x.replace('e', 'E').upper() }}|{{ x.replace('x', 'y', 1) }}|{{ x.strip().split(' ')|length }}|{{ x|replace('t', 'T') }}|{{ x.format('A', 'B') }}|{{ x|trim|lower }}`,
		`{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ l|tojson(ensure_ascii=False) }}|{{ d.c|items|list }}|{{ d|dictsort }}|{{ (1, 2)|list }}|{{ (1,)|length }}|{{ ()|length }}`,
		`{% for k, v in d|dictsort %}{{ loop.index }}:{{ k }}={{ v }}{% if not loop.last %}, {% endif %}{% endfor %}`,
		`{% for i in l if i.n > 1 %}{{ i.a }}{% else %}none{% endfor %}|{% for c in 'abc' %}{{ c }}{{ loop.cycle('-', '+') }}{% endfor %}|{% for i in range(2, 10, 3) %}{{ i }}{% endfor %}`,
		`{% set ns = namespace(n=0, items=[]) %}{% for i in l %}{% set ns.n = ns.n + i.n %}{% set ns.items = ns.items + [i.a] %}{% endfor %}{{ ns.n }} {{ ns.items }}`,
		`{% set acc = [] %}{% for i in l %}{{ acc.append(i.a) }}{% endfor %}{{ acc }}{% set dd = {'a': 1} %}{{ dd.update({'b': [2]}) }}{{ dd }}{{ acc.insert(0, 'z') }}{{ acc|join('/') }}{{ acc.pop() }}`,
		`{% macro m(a, b='dflt') %}[{{ a }}|{{ b }}{% if caller is defined %}|{{ caller() }}{% endif %}]{% endmacro %}{{ m(1) }}{{ m(2, b='B') }}{% call m(3) %}inner{% endcall %}`,
		`{% macro walk(v, depth=0) %}{% if v is mapping %}{% for k in v %}{{ k }}({{ walk(v[k], depth + 1) }}){% endfor %}{% elif v is sequence and v is not string %}{% for i in v %}{{ walk(i, depth + 1) }};{% endfor %}{% else %}{{ v }}@{{ depth }}{% endif %}{% endmacro %}{{ walk(d) }}`,
		`{% set block %}captured {{ x|trim }}{% endset %}[{{ block }}]{% filter upper %}shout {{ 'it' }}{% endfilter %}{% raw %}{{ not rendered }}{% endraw %}`,
		"  {% if true %}\n  yes\n  {% endif %}\n{%- if false -%} no {%- else %}  else  {% endif -%}\n  end {# comment #}\n{{- ' tight ' -}}\n done",
		"{% for m in messages %}\n  {{- m.role }}: {{ m.content | trim }}\n{% endfor %}\n{{ messages|length }}{{ messages[0]['role'] }}{{ messages[-1].content }}",
		`{{ l|map(attribute='a')|join(', ') }}|{{ l|selectattr('n', 'gt', 1)|map(attribute='a')|list }}|{{ l|sort(attribute='n')|first }}|{{ [3, 1, 2]|max }}|{{ [1, 2]|sum }}|{{ x|indent(2) }}|{{ 'a\nb\n\nc'|indent(3, true) }}`,
		`{{ raise_undefined is defined }}|{{ range(3)|list }}|{{ namespace(a=1).a }}|{{ dict(k='v')|tojson }}|{{ '%d' }}|{{ 'é' ~ 3 ~ none ~ true }}|{{ [1, 'a', none] }}|{{ {'k': [1, {'n': none}]} }}`,
		`{% generation %}gen {{ 1 }}{% endgeneration %}{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}`,
		`{{ messages[0].content.startswith('Be') }}{{ messages[2].content.split('</think>')[-1].lstrip('\n') }}{{ x.count('e') }}{{ x.find('Case') }}{{ x.title() }}{{ 'abc'.endswith('c') }}`,
	}
	for i, src := range snippets {
		raw, instrumented := tmplCompare(t, src, data)
		require.NotEqual(t, "error", raw, "snippet %d does not render with the library", i)
		require.Equal(t, raw, instrumented, "snippet %d: %s", i, src)
	}

	// Real chat templates: ours, and the ones the library tests with when
	// its module source is on disk.
	templates := map[string]string{}
	for _, name := range []string{"llama3.jinja", "qwen3.jinja", "llama3.1.jinja", "llama3.2.jinja", "mistral-v3.jinja"} {
		b, err := os.ReadFile(filepath.Join("testdata", "templates", name))
		require.NoError(t, err)
		templates[name] = string(b)
	}
	requests := []string{request}
	if dir := tmplJinjaModuleDir(); dir != "" {
		files, _ := filepath.Glob(filepath.Join(dir, "testdata", "templates", "*.jinja"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			templates[filepath.Base(f)] = string(b)
		}
		reqs, _ := filepath.Glob(filepath.Join(dir, "testdata", "requests", "*.json"))
		for _, f := range reqs {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			requests = append(requests, string(b))
		}
	}
	names := make([]string, 0, len(templates))
	for name := range templates {
		names = append(names, name)
	}
	sort.Strings(names)
	rendered := 0
	for _, name := range names {
		for i, req := range requests {
			raw, instrumented := tmplCompare(t, templates[name], tmplTestData(t, req))
			require.Equal(t, raw, instrumented, "template %s, request %d", name, i)
			if raw != "error" {
				rendered++
			}
		}
	}
	t.Logf("%d templates x %d requests, %d rendered identically (the rest fail in both)", len(templates), len(requests), rendered)
}

// tmplJinjaModuleDir returns the source directory of the jinja module, or ""
// when the go command cannot tell.
func tmplJinjaModuleDir() string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/ardanlabs/jinja").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
