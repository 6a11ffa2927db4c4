package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
	"github.com/llmd/llmd/daemon"
	"github.com/llmd/llmd/store"
)

// startDaemon runs an in-process llmd with cfg on a loopback port and
// returns its base URL and a function that stops it (called at the end of
// the test if not before).
func startDaemon(t *testing.T, cfg daemon.Config) (base string, stop func()) {
	t.Helper()
	s, err := daemon.Open(cfg, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	require.NoError(t, err)
	addr, err := s.Listen()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(15 * time.Second):
				t.Error("llmd did not stop")
			}
		})
	}
	t.Cleanup(stop)
	base = "http://" + addr.String()
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond)
	return base, stop
}

// daemonConfig is a small, fast llmd serving sim/small from dir, in a
// cluster.
func daemonConfig(node, dir, gossip string, join ...string) daemon.Config {
	cfg := daemon.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.NodeID = node
	cfg.Models = []string{"small"}
	cfg.StepTimeScale = 0.01
	cfg.DataDir = dir
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Cluster = &daemon.ClusterConfig{GossipAddr: gossip, Join: join, InsecureGossip: true, Profile: "local"}
	return cfg
}

// freeGossipAddr returns a loopback host:port free for both TCP and UDP
// (memberlist binds both).
func freeGossipAddr(t *testing.T) string {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err == nil {
			pc.Close()
			return addr
		}
	}
	t.Fatal("no free gossip port")
	return ""
}

// chat sends one short chat completion to base with key.
func chat(t *testing.T, base, key string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/chat/completions", strings.NewReader(
		`{"model":"sim/small","max_tokens":4,"messages":[{"role":"user","content":"hello"}]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
}

// TestUsageClusterDaemons: two real llmd, each with its own data directory
// and ledger, joined in a cluster. "llmctl usage --cluster" on either sums
// both ledgers with one admin key that both stores hold; once one node
// has left, its usage is named missing and the other's still shows.
func TestUsageClusterDaemons(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts two in-process llmd joined in a cluster; make test runs it")
	}
	ctx := context.Background()
	dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	st, err := store.Open(ctx, dirA)
	require.NoError(t, err)
	_, err = st.EnsureTenant(ctx, "ops", store.TierEnterprise)
	require.NoError(t, err)
	key, _, err := st.CreateKey(ctx, "ops", true, "test")
	require.NoError(t, err)
	require.NoError(t, st.Close())
	// The same key on both nodes: b starts from a copy of a's store.
	require.NoError(t, os.MkdirAll(dirB, 0o700))
	entries, err := os.ReadDir(dirA)
	require.NoError(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dirA, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dirB, e.Name()), b, 0o600))
	}

	gossipA := freeGossipAddr(t)
	baseA, _ := startDaemon(t, daemonConfig("node-a", dirA, gossipA))
	baseB, stopB := startDaemon(t, daemonConfig("node-b", dirB, "127.0.0.1:0", gossipA))
	chat(t, baseA, key)
	chat(t, baseA, key)
	chat(t, baseB, key)

	usage := func(base string, args ...string) (clusterUsageReport, string) {
		out, errOut, err := runCmd(t, "", append([]string{"--addr", base, "--api-key", key, "usage", "--cluster", "--by", "tenant"},
			args...)...)
		require.NoError(t, err, errOut)
		var r clusterUsageReport
		if strings.HasPrefix(out, "{") {
			require.NoError(t, json.Unmarshal([]byte(out), &r))
		}
		return r, out + errOut
	}
	for _, base := range []string{baseA, baseB} {
		require.Eventually(t, func() bool {
			r, _ := usage(base, "--json")
			return fmt.Sprint(r.Nodes) == "[node-a node-b]" && len(r.Missing) == 0 && r.Total.Requests == 3
		}, 15*time.Second, 50*time.Millisecond, "both ledgers from %s", base)
	}
	r, _ := usage(baseA, "--json")
	require.Len(t, r.Rows, 1)
	require.Equal(t, "ops", r.Rows[0].Key)
	require.EqualValues(t, 3, r.Rows[0].Requests)
	require.Positive(t, r.Rows[0].OutputTokens)
	_, text := usage(baseA)
	require.Contains(t, text, "\n2 nodes: node-a, node-b\n")
	require.Regexp(t, `\nops +3 +0 +0 +0 +[1-9]`, text)

	// Once b has left, a's report stands alone and says so.
	stopB()
	var last string
	require.Eventually(t, func() bool {
		r, out := usage(baseA, "--json")
		last = out
		return fmt.Sprint(r.Nodes) == "[node-a]" && fmt.Sprint(r.Missing) == "[node-b]" && r.Total.Requests == 2
	}, 15*time.Second, 50*time.Millisecond)
	require.Contains(t, last, "llmctl: node node-b ("+strings.TrimPrefix(baseB, "http://")+"): skipped: it is left; "+
		"its usage is not in the report\n")
}

// TestUsageByDecisionDaemon: a real llmd reports by decision, requests to
// a model named directly under "(none)", with their mean latencies.
func TestUsageByDecisionDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts an in-process llmd; make test runs it")
	}
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(ctx, dir)
	require.NoError(t, err)
	_, err = st.EnsureTenant(ctx, "ops", store.TierEnterprise)
	require.NoError(t, err)
	key, _, err := st.CreateKey(ctx, "ops", true, "test")
	require.NoError(t, err)
	require.NoError(t, st.Close())

	cfg := daemonConfig("node-a", dir, "")
	cfg.Cluster = nil
	base, _ := startDaemon(t, cfg)
	chat(t, base, key)
	chat(t, base, key)

	var r api.UsageReport
	require.Eventually(t, func() bool {
		out, errOut, err := runCmd(t, "", "--addr", base, "--api-key", key, "usage", "--by", "decision", "--json")
		require.NoError(t, err, errOut)
		require.NoError(t, json.Unmarshal([]byte(out), &r))
		return r.Total.Requests == 2
	}, 15*time.Second, 50*time.Millisecond)
	require.Equal(t, "decision", r.By)
	require.Len(t, r.Rows, 1)
	require.Equal(t, "", r.Rows[0].Key)
	require.EqualValues(t, 2, r.Rows[0].Finished)
	require.Positive(t, r.Rows[0].MeanTTFTMs)

	out, errOut, err := runCmd(t, "", "--addr", base, "--api-key", key, "usage", "--by", "decision")
	require.NoError(t, err, errOut)
	require.Contains(t, out, "MEAN TTFT")
	require.Regexp(t, `\n\(none\) +2 +0 +0 +0 +[1-9]`, out)
}
