package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/daemon"
	"github.com/llmd/llmd/engine"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestResolveConfig(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		args []string
		env  map[string]string
		want func(*daemon.Config)
		err  string
	}{
		"defaults": {
			env: map[string]string{"XDG_DATA_HOME": "/data"},
			want: func(c *daemon.Config) {
				c.DataDir = "/data/llmd"
			},
		},
		"flags": {
			args: []string{"--listen", "127.0.0.1:9000", "--gpu", "h200", "--tp", "2", "--models", "small,flagship",
				"--data-dir", "/d", "--heartbeat", "3s"},
			want: func(c *daemon.Config) {
				c.Listen, c.GPU, c.TP, c.Models, c.DataDir, c.HeartbeatInterval =
					"127.0.0.1:9000", "h200", 2, []string{"small", "flagship"}, "/d", 3*time.Second
			},
		},
		"env": {
			env: map[string]string{"LLMD_LISTEN": "[::1]:9", "LLMD_MODELS": "mid, small", "LLMD_TP": "4",
				"LLMD_DATA_DIR": "/e", "LLMD_HEARTBEAT": "1m"},
			want: func(c *daemon.Config) {
				c.Listen, c.Models, c.TP, c.DataDir, c.HeartbeatInterval = "[::1]:9", []string{"mid", "small"}, 4, "/e", time.Minute
			},
		},
		"flag wins over env": {
			args: []string{"--models", "small", "--tp=1"},
			env:  map[string]string{"LLMD_MODELS": "mid", "LLMD_TP": "8", "LLMD_DATA_DIR": "/e"},
			want: func(c *daemon.Config) { c.Models, c.DataDir = []string{"small"}, "/e" },
		},
		"engine flags": {
			args: []string{"--max-batch-tokens", "512", "--max-running", "32", "--expected-output-tokens", "1",
				"--prefix-cache=false", "--data-dir", "/d"},
			want: func(c *daemon.Config) {
				c.Engine.MaxBatchTokens, c.Engine.MaxRunning, c.Engine.ExpectedOutputTokens = 512, 32, 1
				c.Engine.DisablePrefixCache, c.DataDir = true, "/d"
			},
		},
		"engine env": {
			env: map[string]string{"LLMD_PREFIX_CACHE": "false", "LLMD_MAX_RUNNING": "8", "LLMD_DATA_DIR": "/e"},
			want: func(c *daemon.Config) {
				c.Engine.DisablePrefixCache, c.Engine.MaxRunning, c.DataDir = true, 8, "/e"
			},
		},
		"access and quota flags": {
			args: []string{"--data-dir", "/d", "--insecure", "--redis", "redis://127.0.0.1:6379/0", "--quota-shadow",
				"--quota-timeout", "40ms", "--tier-weights", "enterprise=10,batch=0.5", "--degrade-route", "sim/flagship=sim/small",
				"--degrade-max-tokens", "64", "--degrade-queue-wait", "4s", "--hot-tenant-rps", "500", "--hot-tenant-shards", "16"},
			want: func(c *daemon.Config) {
				c.DataDir, c.Insecure, c.RedisURL, c.QuotaShadow = "/d", true, "redis://127.0.0.1:6379/0", true
				c.QuotaTimeout = 40 * time.Millisecond
				c.HotTenantRPS, c.HotTenantShards = 500, 16
				c.Engine.TierWeights[engine.PriorityBatch], c.Engine.TierWeights[engine.PriorityEnterprise] = 0.5, 10
				c.DegradeRoutes = map[string]string{"sim/flagship": "sim/small"}
				c.DegradeFreeMaxTokens = 64
				c.Engine.Ladder.QueueWaitHigh, c.Engine.Ladder.QueueWaitLow = 4*time.Second, time.Second
			},
		},
		"no degrade": {
			env:  map[string]string{"LLMD_NO_DEGRADE": "true", "LLMD_DATA_DIR": "/e"},
			want: func(c *daemon.Config) { c.Engine.Ladder.Disabled, c.DataDir = true, "/e" },
		},
		"cluster flags": {
			args: []string{"--data-dir", "/d", "--join", "10.0.0.2:7946,10.0.0.3:7946", "--gossip-addr", "127.0.0.1:7947",
				"--gossip-key", "MDEyMzQ1Njc4OWFiY2RlZg=="},
			want: func(c *daemon.Config) {
				c.DataDir = "/d"
				c.Cluster = &daemon.ClusterConfig{GossipAddr: "127.0.0.1:7947", Join: []string{"10.0.0.2:7946", "10.0.0.3:7946"},
					Key: []byte("0123456789abcdef"), RoutePolicy: cluster.PolicyPrefix, LoadBound: 1.25, LoadSlack: 8,
					ForwardTimeout: 2 * time.Second, DisaggTimeout: time.Minute, Disagg: cluster.DisaggPolicy{MinPromptTokens: 512}}
			},
		},
		"disaggregation flags": {
			args: []string{"--data-dir", "/d", "--gossip-addr", "127.0.0.1:7947", "--insecure-gossip", "--role", "decode",
				"--disagg-min-prompt", "1024", "--disagg-busy-running", "16", "--disagg-timeout", "5s"},
			want: func(c *daemon.Config) {
				c.DataDir = "/d"
				c.Cluster = &daemon.ClusterConfig{GossipAddr: "127.0.0.1:7947", InsecureGossip: true, RoutePolicy: cluster.PolicyPrefix,
					LoadBound: 1.25, LoadSlack: 8, ForwardTimeout: 2 * time.Second, Role: cluster.RoleDecode, DisaggTimeout: 5 * time.Second,
					Disagg: cluster.DisaggPolicy{MinPromptTokens: 1024, BusyRunning: 16}}
			},
		},
		"bad role": {
			args: []string{"--data-dir", "/d", "--gossip-addr", "127.0.0.1:7947", "--insecure-gossip", "--role", "encode"},
			err:  "--role",
		},
		"bad disagg threshold": {
			args: []string{"--data-dir", "/d", "--gossip-addr", "127.0.0.1:7947", "--insecure-gossip", "--disagg-min-prompt", "0"},
			err:  "--disagg-min-prompt",
		},
		"routing flags": {
			args: []string{"--data-dir", "/d", "--gossip-addr", "127.0.0.1:7947", "--insecure-gossip", "--route-policy", "round_robin",
				"--load-bound", "1.5", "--load-slack", "0", "--forward-timeout", "500ms", "--fallback-model", "sim/flagship=sim/mid"},
			want: func(c *daemon.Config) {
				c.DataDir = "/d"
				c.Cluster = &daemon.ClusterConfig{GossipAddr: "127.0.0.1:7947", InsecureGossip: true, RoutePolicy: cluster.PolicyRoundRobin,
					LoadBound: 1.5, LoadSlack: -1, ForwardTimeout: 500 * time.Millisecond,
					Fallback:      map[string]string{"sim/flagship": "sim/mid"},
					DisaggTimeout: time.Minute, Disagg: cluster.DisaggPolicy{MinPromptTokens: 512}}
			},
		},
		"bad route policy": {
			args: []string{"--data-dir", "/d", "--gossip-addr", "127.0.0.1:7947", "--insecure-gossip", "--route-policy", "random"},
			err:  "--route-policy",
		},
		"bad fallback": {
			args: []string{"--data-dir", "/d", "--gossip-addr", "127.0.0.1:7947", "--insecure-gossip", "--fallback-model", "sim/mid"},
			err:  "FROM=TO",
		},
		"load bound below 1": {
			args: []string{"--data-dir", "/d", "--gossip-addr", "127.0.0.1:7947", "--insecure-gossip", "--load-bound", "0.5"},
			err:  "--load-bound",
		},
		"cluster without a key": {
			args: []string{"--data-dir", "/d", "--join", "10.0.0.2:7946"},
			err:  "--gossip-key",
		},
		"bad gossip key": {
			args: []string{"--data-dir", "/d", "--join", "10.0.0.2:7946", "--gossip-key", "c2hvcnQ="},
			err:  "16, 24 or 32 bytes",
		},
		"bad engine flag": {
			args: []string{"--max-running", "0", "--data-dir", "/d"},
			err:  "max running",
		},
		"bad env": {
			env: map[string]string{"LLMD_TP": "many", "LLMD_DATA_DIR": "/e"},
			err: `LLMD_TP="many"`,
		},
		"bad tier weight": {
			args: []string{"--tier-weights", "gold=3"},
			err:  "--tier-weights",
		},
		"bad degrade route": {
			args: []string{"--degrade-route", "sim/flagship"},
			err:  "MODEL=SMALLER",
		},
		"hot tenants without redis": {
			args: []string{"--data-dir", "/d", "--hot-tenant-rps", "100"},
			err:  "needs the quota in Redis",
		},
		"bad hot tenant shards": {
			args: []string{"--data-dir", "/d", "--redis", "redis://127.0.0.1:6379/0", "--hot-tenant-rps", "100",
				"--hot-tenant-shards", "1"},
			err: "hot tenant shards is 1",
		},
		"bad hot tenant rate": {
			env: map[string]string{"LLMD_HOT_TENANT_RPS": "-5", "LLMD_DATA_DIR": "/e"},
			err: "hot tenant rate is -5",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fs := pflag.NewFlagSet("llmd", pflag.ContinueOnError)
			o := &options{}
			o.bind(fs)
			require.NoError(t, fs.Parse(tc.args))
			getenv := envOf(tc.env)
			err := applyEnv(fs, getenv)
			var cfg daemon.Config
			if err == nil {
				cfg, err = o.config(getenv)
			}
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			want := daemon.DefaultConfig()
			tc.want(&want)
			require.Equal(t, want, cfg)
		})
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"unknown flag": {args: []string{"--nope"}, want: "unknown flag: --nope"},
		"bad int":      {args: []string{"--tp", "x"}, want: "invalid argument"},
		"argument":     {args: []string{"serve"}, want: "unknown command"},
		"log level":    {args: []string{"--log-level", "loud"}, want: `log level "loud"`},
		"bad env":      {env: map[string]string{"LLMD_HEARTBEAT": "soon"}, want: "LLMD_HEARTBEAT"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := execute(t.Context(), tc.args, envOf(tc.env), &stdout, &stderr)
			require.Equal(t, exitUsage, code, "stderr: %s", stderr.String())
			require.True(t, strings.HasPrefix(stderr.String(), "llmd: "), stderr.String())
			require.Contains(t, stderr.String(), tc.want)
			require.Empty(t, stdout.String())
		})
	}
}

// TestPublicAddressNeedsAKey: llmd refuses a non-loopback listener while
// its data directory holds no API key, and says how to make one.
func TestPublicAddressNeedsAKey(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	dir := t.TempDir()
	code := execute(t.Context(), []string{"--listen", "0.0.0.0:0", "--models", "small", "--data-dir", dir, "--log-level", "error"},
		envOf(nil), &stdout, &stderr)
	require.Equal(t, exitFailure, code)
	require.Contains(t, stderr.String(), "no API key exists yet")
	require.Contains(t, stderr.String(), "llmctl keys create --admin --data-dir "+dir)
	require.Contains(t, stderr.String(), "--insecure")
}

func TestModelThatDoesNotFit(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := execute(t.Context(), []string{"--listen", "127.0.0.1:0", "--gpu", "l40s", "--models", "flagship",
		"--data-dir", t.TempDir(), "--log-level", "error"}, envOf(nil), &stdout, &stderr)
	require.Equal(t, exitFailure, code)
	require.Contains(t, stderr.String(), "cannot serve sim/flagship")
}

// TestBinary builds llmd, starts it, waits for /readyz, sends a request and
// stops it with SIGTERM: it must exit 0.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: building and running the llmd binary takes seconds; make test runs it")
	}
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "llmd")
	out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	dataDir := filepath.Join(dir, "data")
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--models", "small,mid", "--data-dir", dataDir, "--log-format", "json")
	cmd.Env = append(os.Environ(), "LLMD_GPU=h200")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	lines := make(chan string, 1)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		exited <- cmd.Wait()
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	// The startup line names the address and the models.
	var line string
	select {
	case line = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatalf("no startup line; stderr:\n%s", stderr.String())
	}
	m := regexp.MustCompile(`^llmd listening on http://(\S+) serving sim/small, sim/mid$`).FindStringSubmatch(line)
	require.NotNil(t, m, "startup line %q", line)
	select {
	case line = <-lines:
		require.Contains(t, line, "SIMULATED executor", "the simulated models are labelled as such")
	case <-time.After(10 * time.Second):
		t.Fatal("no second startup line")
	}
	base := "http://" + m[1]

	c := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	require.Eventually(t, func() bool {
		resp, err := c.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond)

	resp, err := c.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(
		`{"model":"sim/mid","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), `"object":"chat.completion"`)
	require.DirExists(t, dataDir)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		stopped = true
		require.NoError(t, err, "exit status; stderr:\n%s", stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("llmd did not stop on SIGTERM; stderr:\n%s", stderr.String())
	}
	logs := stderr.String()
	require.Contains(t, logs, `"executor":"SIMULATED"`)
	require.Contains(t, logs, `"gpu":"H200`)
	require.Contains(t, logs, `"msg":"request"`)
	require.Contains(t, logs, `"msg":"stopped"`)
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestProgressBar(t *testing.T) {
	var b strings.Builder
	p := progressBar(&b)
	p(0, 2, "tiny")
	p(1, 2, "qw")
	p(2, 2, "")
	require.Equal(t, "\r\x1b[Kloading models [--------------------] 0/2 tiny"+
		"\r\x1b[Kloading models [##########----------] 1/2 qw"+
		"\r\x1b[Kloading models [####################] 2/2 \n", b.String())
}

// TestAccessBanner: the banner says whether requests need a key and how to
// get one.
func TestAccessBanner(t *testing.T) {
	t.Parallel()
	cfg := daemon.DefaultConfig()
	cfg.DataDir = "/data/llmd"
	open := accessBanner(cfg, false)
	require.Contains(t, open, "no API key exists yet")
	require.Contains(t, open, "llmctl keys create --admin")
	closed := accessBanner(cfg, true)
	require.Contains(t, closed, "API keys required")
	require.Contains(t, closed, "llmctl login")
	require.Contains(t, closed, "--data-dir /data/llmd")
	cfg.Anonymous = true
	require.Contains(t, accessBanner(cfg, true), "--anonymous")
}
