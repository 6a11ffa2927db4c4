//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/llmd/llmd/api"
)

// netnsScript is scripts/netns-partition.sh, from this package's directory.
const netnsScript = "../../scripts/netns-partition.sh"

// netnsDialer dials from inside network namespace ns (a name under
// /var/run/netns): a socket belongs to the namespace of the thread that
// creates it, so each dial runs on a thread of its own, moved into ns and
// never moved back (the runtime ends a thread whose goroutine exits while
// locked to it).
func netnsDialer(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
			f, err := os.Open(filepath.Join("/var/run/netns", ns))
			if err != nil {
				ch <- result{err: err}
				return
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				ch <- result{err: fmt.Errorf("setns %s: %w", ns, err)}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

// skipWithoutNetns skips unless this process can make network namespaces.
func skipWithoutNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces")
	}
	for _, tool := range []string{"ip", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (scripts/netns-partition.sh uses it)", tool)
		}
	}
	probe := fmt.Sprintf("llmdprobe%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		t.Skipf("ip netns add fails here (no CAP_SYS_ADMIN, or no netns support): %v: %s", err, strings.TrimSpace(string(out)))
	}
	_ = exec.Command("ip", "netns", "del", probe).Run()
}

// TestPartitionHeal is CL-3 with real processes: five llmd in network
// namespaces (scripts/netns-partition.sh, 20 ms gossip: --gossip-profile
// local) are split {1,2} / {3,4,5}. Each side keeps serving its own
// requests and sees the other side dead (or already forgotten); after the
// heal all five see five alive within 5 s.
func TestPartitionHeal(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds llmd and runs five of them in network namespaces")
	}
	skipWithoutNetns(t)
	bin := buildLLMD(t)

	prefix := fmt.Sprintf("llt%d", os.Getpid()%100000)
	env := append(os.Environ(), "LLMD_BIN="+bin, "LLMD_GOSSIP_PROFILE=local", "LLMD_NETNS_PREFIX="+prefix,
		fmt.Sprintf("LLMD_NETNS_SUBNET=10.%d.%d", 100+os.Getpid()%100, os.Getpid()/100%250),
		"LLMD_NETNS_STATE="+filepath.Join(t.TempDir(), "netns"), "LLMD_ARGS=--models small --log-level warn")
	script := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(netnsScript, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "netns-partition.sh %s: %s", strings.Join(args, " "), out)
		return strings.TrimSpace(string(out))
	}

	// run stays up until its stdin closes, then tears everything down.
	run := exec.Command(netnsScript, "run", "5")
	run.Env = env
	stdin, err := run.StdinPipe()
	require.NoError(t, err)
	stdout, err := run.StdoutPipe()
	require.NoError(t, err)
	stderr := &syncBuffer{}
	run.Stderr = stderr
	require.NoError(t, run.Start())
	exited := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		exited <- run.Wait()
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("netns-partition.sh run: %v; stderr:\n%s", err, stderr.String())
			}
		case <-time.After(60 * time.Second):
			t.Errorf("netns-partition.sh run did not tear down; stderr:\n%s", stderr.String())
			_ = run.Process.Kill()
		}
		_ = exec.Command(netnsScript, "down").Run() // belt and braces; run's own down already ran
	})
	select {
	case <-ready:
	case err := <-exited:
		t.Fatalf("netns-partition.sh run exited: %v; stderr:\n%s", err, stderr.String())
	case <-time.After(90 * time.Second):
		t.Fatalf("netns-partition.sh run not ready after 90 s; stderr:\n%s", stderr.String())
	}

	// Every call reaches node i on 127.0.0.1 inside its namespace: the
	// admin routes answer loopback clients only.
	const base = "http://127.0.0.1:8700"
	clients := make([]*http.Client, 6) // 1-based
	for i := 1; i <= 5; i++ {
		clients[i] = &http.Client{Timeout: 5 * time.Second,
			Transport: &http.Transport{DialContext: netnsDialer(fmt.Sprintf("%s%d", prefix, i)), DisableKeepAlives: true}}
	}
	statuses := func(i int) map[string]string {
		st, err := nodeStatuses(clients[i], base)
		if err != nil {
			return nil
		}
		return st
	}
	allSeeFive := func() bool {
		for i := 1; i <= 5; i++ {
			if st := statuses(i); len(st) != 5 || countAlive(st) != 5 {
				return false
			}
		}
		return true
	}
	require.Eventually(t, allSeeFive, 20*time.Second, 50*time.Millisecond, "five nodes see five alive")

	// Both figures count from when the script starts: an upper bound, as
	// it applies the cut (and lifts it) node by node.
	partitioned := time.Now()
	method := script("partition", "1 2", "3 4 5")
	cutTook := time.Since(partitioned)
	side := map[int][]string{1: {"n1", "n2"}, 2: {"n1", "n2"}, 3: {"n3", "n4", "n5"}, 4: {"n3", "n4", "n5"}, 5: {"n3", "n4", "n5"}}
	other := map[int][]string{1: side[3], 2: side[3], 3: side[1], 4: side[1], 5: side[1]}
	sawDead := 0 // node pairs seen "dead" before being forgotten
	seenDead := map[string]bool{}
	require.Eventually(t, func() bool {
		ok := true
		for i := 1; i <= 5; i++ {
			st := statuses(i)
			if st == nil {
				return false
			}
			for _, id := range side[i] {
				ok = ok && st[id] == "alive"
			}
			for _, id := range other[i] {
				s, listed := st[id]
				if s == "dead" && !seenDead[fmt.Sprint(i, id)] {
					seenDead[fmt.Sprint(i, id)] = true
					sawDead++
				}
				// Dead, or suspect on the way there, or already pruned.
				ok = ok && (!listed || s == "dead" || s == "suspect")
			}
		}
		return ok
	}, 15*time.Second, 20*time.Millisecond, "each side sees the other gone")
	detected := time.Since(partitioned)

	// Each side serves its own requests.
	for i := 1; i <= 5; i++ {
		resp, err := clients[i].Post(base+"/v1/chat/completions", "application/json", strings.NewReader(
			`{"model":"sim/small","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err, "node %d", i)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "node %d: %s", i, body)
		require.Contains(t, string(body), `"object":"chat.completion"`)
	}
	// A partition that outlasts memberlist's memory of the dead (2 s with
	// the local profile).
	time.Sleep(time.Until(partitioned.Add(3 * time.Second)))

	healed := time.Now()
	script("heal")
	healTook := time.Since(healed)
	require.Eventually(t, allSeeFive, 15*time.Second, 20*time.Millisecond, "all five see five alive after the heal")
	rejoin := time.Since(healed)
	t.Logf("CL-3: %s (applied in %v); each side saw the other gone %v after the partition began (%d of 12 node pairs "+
		"seen dead before pruned); partitioned %v; all 5 saw 5 alive %v after the heal began (lifted in %v)",
		method, cutTook.Round(10*time.Millisecond), detected.Round(10*time.Millisecond), sawDead,
		healed.Sub(partitioned).Round(10*time.Millisecond), rejoin.Round(10*time.Millisecond), healTook.Round(10*time.Millisecond))
	require.Less(t, rejoin, 5*time.Second, "rejoin within 5 s of the heal (CL-3)")

	replicationAcrossPartition(t, script, clients, base)
}

// replicationAcrossPartition is issue 25's partition case for the
// replicated control state, on TestPartitionHeal's five healed nodes: a
// key revoked on one side and a key made on the other while {1,2} and
// {3,4,5} are cut off from each other converge on every node after the
// heal, with no manual step (the revocation wins everywhere).
func replicationAcrossPartition(t *testing.T, script func(args ...string) string, clients []*http.Client, base string) {
	call := func(i int, method, path, key, body string) (int, []byte) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := clients[i].Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	createKey := func(i int, admin, body string) (api.KeyCreated, time.Time) {
		st, b := call(i, http.MethodPost, "/v1/admin/keys", admin, body)
		require.Equal(t, http.StatusCreated, st, "node %d: %s", i, b)
		var kc api.KeyCreated
		require.NoError(t, json.Unmarshal(b, &kc))
		return kc, time.Now()
	}
	works := func(i int, key string) bool {
		st, _ := call(i, http.MethodGet, "/v1/models", key, "")
		return st == http.StatusOK
	}
	everywhere := func(key string, want bool, nodes ...int) func() bool {
		return func() bool {
			for _, i := range nodes {
				if works(i, key) != want {
					return false
				}
			}
			return true
		}
	}
	all := []int{1, 2, 3, 4, 5}

	// An admin key made on node 1 (anonymous loopback admin: no key
	// exists yet) closes every node once it arrives.
	admin, made := createKey(1, "", `{"tenant":"ops","admin":true}`)
	require.Eventually(t, everywhere(admin.Key, true, all...), 5*time.Second, 10*time.Millisecond)
	adminSpread := time.Since(made)
	user, _ := createKey(1, admin.Key, `{"tenant":"acme"}`)
	require.Eventually(t, everywhere(user.Key, true, all...), 5*time.Second, 10*time.Millisecond)

	script("partition", "1 2", "3 4 5")
	// Revoked on the big side, made on the small one.
	st, b := call(4, http.MethodDelete, "/v1/admin/keys/"+user.ID, admin.Key, "")
	require.Equal(t, http.StatusOK, st, "%s", b)
	require.Eventually(t, everywhere(user.Key, false, 3, 4, 5), 5*time.Second, 10*time.Millisecond)
	late, _ := createKey(2, admin.Key, `{"tenant":"acme","name":"made during the partition"}`)
	require.Eventually(t, everywhere(late.Key, true, 1, 2), 5*time.Second, 10*time.Millisecond)
	// Neither crossed the cut.
	require.True(t, everywhere(user.Key, true, 1, 2)(), "the revocation stayed on its side")
	require.True(t, everywhere(late.Key, false, 3, 4, 5)(), "the new key stayed on its side")

	healed := time.Now()
	script("heal")
	require.Eventually(t, func() bool {
		return everywhere(user.Key, false, all...)() && everywhere(late.Key, true, all...)()
	}, 40*time.Second, 20*time.Millisecond, "both sides' changes on every node after the heal")
	t.Logf("replicated control state: an admin key made on n1 worked on all 5 nodes %v later; across a {1,2}/{3,4,5} "+
		"partition a revocation (made on n4) and a new key (made on n2) held on every node %v after the heal",
		adminSpread.Round(10*time.Millisecond), time.Since(healed).Round(10*time.Millisecond))
}
