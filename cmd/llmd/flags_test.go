package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/daemon"
)

// parseConfig runs llmd's flag and environment resolution on args and env.
func parseConfig(t *testing.T, args []string, env map[string]string) (daemon.Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("llmd", pflag.ContinueOnError)
	o := &options{}
	o.bind(fs)
	require.NoError(t, fs.Parse(args))
	getenv := envOf(env)
	if err := applyEnv(fs, getenv); err != nil {
		return daemon.Config{}, err
	}
	return o.config(getenv)
}

// TestHelpListsEveryEnvVar: llmd --help shows each visible flag's
// environment variable, and each of them works.
func TestHelpListsEveryEnvVar(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitOK, execute(t.Context(), []string{"--help"}, envOf(nil), &stdout, &stderr))
	help := stdout.String()
	cmd := newRootCmd(envOf(nil))
	n := 0
	cmd.Flags().VisitAll(func(fl *pflag.Flag) {
		if fl.Hidden || fl.Name == "help" {
			return
		}
		n++
		require.Regexp(t, regexp.MustCompile(`--`+regexp.QuoteMeta(fl.Name)+` .*\[\$`+envName(fl.Name)+`\]`), help)
	})
	require.Greater(t, n, 60)
	for _, v := range []string{"LLMD_CPU_THREADS", "LLMD_KV_CACHE_MIB", "LLMD_ROUTE_POLICY", "LLMD_LOAD_BOUND",
		"LLMD_FALLBACK_MODEL", "LLMD_MEMORY_BUDGET_MIB", "LLMD_SAFETY_URL"} {
		require.Contains(t, help, "[$"+v+"]")
	}

	cfg, err := parseConfig(t, []string{"--data-dir", "/d"}, map[string]string{
		"LLMD_CPU_THREADS": "3", "LLMD_KV_CACHE_MIB": "64", "LLMD_ROUTE_POLICY": "least_loaded",
		"LLMD_GOSSIP_ADDR": "127.0.0.1:7999", "LLMD_INSECURE_GOSSIP": "true",
		"LLMD_UPSTREAM": "a=http://127.0.0.1:1,http://127.0.0.1:2\nb=http://127.0.0.1:3",
	})
	require.NoError(t, err)
	require.Equal(t, 3, cfg.CPUThreads)
	require.Equal(t, int64(64)<<20, cfg.KVCacheBytes)
	require.NotNil(t, cfg.Cluster)
	require.Equal(t, "least_loaded", string(cfg.Cluster.RoutePolicy))
	require.Len(t, cfg.Upstreams, 2, "LLMD_UPSTREAM: one per line, commas inside a value")
	require.Equal(t, []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, cfg.Upstreams[0].URLs)
}

// TestEnumsRefusedAtStartup: a value outside a flag's names is a usage
// error that lists the valid ones, even when the feature is off.
func TestEnumsRefusedAtStartup(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"route policy":     {args: []string{"--route-policy", "bogus"}, want: `--route-policy "bogus": use one of prefix, cost, affinity, round_robin, least_loaded, local`},
		"route policy env": {env: map[string]string{"LLMD_ROUTE_POLICY": "fastest"}, want: `--route-policy "fastest"`},
		"safety policy":    {args: []string{"--safety-policy", "maybe"}, want: `--safety-policy "maybe": use open or closed`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := execute(t.Context(), append(tc.args, "--data-dir", t.TempDir()), envOf(tc.env), &stdout, &stderr)
			require.Equal(t, exitUsage, code, stderr.String())
			require.Contains(t, stderr.String(), tc.want)
		})
	}
}

// TestListFlagsOneWay: --degrade-route and --fallback-model take repeated
// flags and comma-separated lists alike.
func TestListFlagsOneWay(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"repeated": {"--degrade-route", "sim/flagship=sim/small", "--degrade-route", "sim/mid=sim/small",
			"--fallback-model", "sim/flagship=sim/mid", "--fallback-model", "sim/mid=sim/small"},
		"comma list": {"--degrade-route", "sim/flagship=sim/small,sim/mid=sim/small",
			"--fallback-model", "sim/flagship=sim/mid,sim/mid=sim/small"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg, err := parseConfig(t, append(args, "--data-dir", "/d", "--gossip-addr", "127.0.0.1:7999", "--insecure-gossip"), nil)
			require.NoError(t, err)
			require.Equal(t, map[string]string{"sim/flagship": "sim/small", "sim/mid": "sim/small"}, cfg.DegradeRoutes)
			require.Equal(t, map[string]string{"sim/flagship": "sim/mid", "sim/mid": "sim/small"}, cfg.Cluster.Fallback)
		})
	}
}

// TestModelFiles: the same --model twice is loaded once, and a bare name
// finds the model "llmctl model init" wrote into the data directory.
func TestModelFiles(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	models := filepath.Join(data, "models")
	require.NoError(t, os.MkdirAll(models, 0o755))
	tiny := filepath.Join(models, "tiny.gguf")
	require.NoError(t, os.WriteFile(tiny, []byte("GGUF"), 0o644))
	other := filepath.Join(t.TempDir(), "other.gguf")

	got, err := resolveModelFiles([]string{"tiny", tiny, "tiny.gguf", other, other, "ollama:qwen3:0.6b", "ollama:qwen3:0.6b",
		"missing"}, data)
	require.NoError(t, err)
	require.Equal(t, []string{tiny, other, "ollama:qwen3:0.6b", "missing"}, got)

	// With another --data-dir, the default data directory's models still
	// count.
	got, err = resolveModelFiles([]string{"tiny"}, t.TempDir(), data)
	require.NoError(t, err)
	require.Equal(t, []string{tiny}, got)

	_, err = resolveModelFiles([]string{" "}, data)
	require.Error(t, err)

	cfg, err := parseConfig(t, []string{"--data-dir", data, "--model", "tiny", "--model", "tiny"}, nil)
	require.NoError(t, err)
	require.Equal(t, []string{tiny}, cfg.ModelFiles)
}

// TestSpeculativeFlags: the speculative decoding flags and their
// environment variables reach the daemon's and the engine's configuration,
// and out-of-range values are refused.
func TestSpeculativeFlags(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig(t, []string{"--speculative", "draft", "--draft-model", "d.gguf", "--spec-tokens", "7"},
		map[string]string{"LLMD_SPEC_MAX_BATCH": "2"})
	require.NoError(t, err)
	require.Equal(t, daemon.SpecDraft, cfg.Speculative)
	require.Equal(t, "d.gguf", cfg.DraftModel)
	require.Equal(t, 7, cfg.Engine.Spec.MaxTokens)
	require.Equal(t, 2, cfg.Engine.Spec.MaxBatch)
	require.NoError(t, cfg.Validate())

	def, err := parseConfig(t, nil, nil)
	require.NoError(t, err)
	require.Equal(t, daemon.SpecOff, def.Speculative)

	_, err = parseConfig(t, []string{"--spec-tokens", "99"}, nil)
	require.Error(t, err)
	_, err = parseConfig(t, []string{"--speculative", "medusa"}, nil)
	require.ErrorContains(t, err, "use off, ngram or draft")
}
