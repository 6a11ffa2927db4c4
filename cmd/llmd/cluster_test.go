package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// testGossipKey is the gossip key of the cluster tests, in base64.
var testGossipKey = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))

// TestGossipProfileFlag: the hidden --gossip-profile picks the memberlist
// timings and is not in --help.
func TestGossipProfileFlag(t *testing.T) {
	fs := pflag.NewFlagSet("llmd", pflag.ContinueOnError)
	o := &options{}
	o.bind(fs)
	require.NoError(t, fs.Parse([]string{"--data-dir", "/d", "--gossip-addr", "127.0.0.1:0", "--insecure-gossip",
		"--gossip-profile", "local"}))
	cfg, err := o.config(envOf(nil))
	require.NoError(t, err)
	require.Equal(t, "local", cfg.Cluster.Profile)
	require.True(t, fs.Lookup("gossip-profile").Hidden)
	require.NotContains(t, fs.FlagUsages(), "gossip-profile")
}

// nodeStatuses returns GET /v1/admin/nodes of base as id -> status.
func nodeStatuses(c *http.Client, base string) (map[string]string, error) {
	resp, err := c.Get(base + "/v1/admin/nodes")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/admin/nodes: %s", resp.Status)
	}
	var nl api.NodeList
	if err := json.NewDecoder(resp.Body).Decode(&nl); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(nl.Nodes))
	for _, n := range nl.Nodes {
		out[n.ID] = n.Status
	}
	return out, nil
}

// countAlive counts the alive entries of a nodeStatuses result.
func countAlive(st map[string]string) int {
	n := 0
	for _, s := range st {
		if s == "alive" {
			n++
		}
	}
	return n
}

// TestKill9MarkedDead is the membership half of CL-2: five llmd processes
// on loopback with memberlist's LAN defaults (1 s probes, suspicion 4 s to
// 24 s); one is killed with SIGKILL and the four others must report it
// dead in GET /v1/admin/nodes within 30 s.
func TestKill9MarkedDead(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: five llmd processes and up to 30 s of failure detection; make test runs it")
	}
	t.Parallel()
	bin := buildLLMD(t)
	var (
		procs []*llmdProc
		seed  string
	)
	for i := range 5 {
		gossip := freeAddr(t)
		args := []string{"--models", "small", "--log-level", "warn", "--data-dir", t.TempDir(),
			"--node-id", fmt.Sprintf("n%d", i+1), "--gossip-addr", gossip, "--gossip-key", testGossipKey}
		if i == 0 {
			seed = gossip
		} else {
			args = append(args, "--join", seed)
		}
		procs = append(procs, startLLMD(t, bin, args...))
	}
	c := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	require.Eventually(t, func() bool {
		for _, p := range procs {
			st, err := nodeStatuses(c, p.base)
			if err != nil || len(st) != 5 || countAlive(st) != 5 {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "five llmd see five alive")

	victim, others := procs[2], append(procs[:2:2], procs[3:]...)
	killed := time.Now()
	victim.kill9(t)
	firstSeen := map[string]time.Duration{} // observer -> when it first reported n3 not alive
	var dead time.Duration
	require.Eventually(t, func() bool {
		all := true
		for _, p := range others {
			st, err := nodeStatuses(c, p.base)
			if err != nil {
				return false
			}
			if s := st["n3"]; s != "alive" {
				if _, ok := firstSeen[p.base]; !ok {
					firstSeen[p.base] = time.Since(killed)
				}
			}
			all = all && st["n3"] == "dead"
		}
		if all {
			dead = time.Since(killed)
		}
		return all
	}, 30*time.Second, 100*time.Millisecond, "the four others report n3 dead within 30 s")
	var first time.Duration
	for _, d := range firstSeen {
		if first == 0 || d < first {
			first = d
		}
	}
	t.Logf("CL-2: after kill -9 of 1 of 5 llmd (LAN defaults), the first node reported it suspect or dead after %v, "+
		"all four reported it dead after %v", first.Round(10*time.Millisecond), dead.Round(10*time.Millisecond))
	for _, p := range others {
		st, err := nodeStatuses(c, p.base)
		require.NoError(t, err)
		require.Equal(t, 4, countAlive(st), "%s", p.base)
	}
}
