package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

// TestListingsHaveJSON: every command that lists something takes --json.
func TestListingsHaveJSON(t *testing.T) {
	root := newRootCmd()
	for _, path := range [][]string{{"models"}, {"models", "list"}, {"stats"}, {"nodes"}, {"keys", "list"},
		{"tenants", "list"}, {"quota", "list"}, {"quota", "get"}, {"usage"}, {"top"}, {"config"},
		{"models", "canary"}, {"models", "shadow", "report"}, {"bench"}, {"simulate"}, {"plan"}} {
		cmd, _, err := root.Find(path)
		require.NoError(t, err, path)
		require.NotNil(t, cmd.Flags().Lookup("json"), "%s has no --json", strings.Join(path, " "))
	}

	srv := newFakeLLMD(t, &fakeLLMD{})
	out, _, err := runCmd(t, "", "--addr", srv.URL, "models", "--json")
	require.NoError(t, err)
	var ml api.ModelList
	require.NoError(t, json.Unmarshal([]byte(out), &ml))
	require.Len(t, ml.Data, 3)
	out, _, err = runCmd(t, "", "--addr", srv.URL, "stats", "--json")
	require.NoError(t, err)
	var st api.StatsResponse
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, "sim/small", st.Models[0].Model)
}

// TestModelFlagEverywhere: -m is --model in every command that has one.
func TestModelFlagEverywhere(t *testing.T) {
	root := newRootCmd()
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		if f := c.Flags().Lookup("model"); f != nil && c.Name() != "usage" {
			require.Equal(t, "m", f.Shorthand, "%s --model has no -m", c.CommandPath())
			n++
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	require.GreaterOrEqual(t, n, 4, "chat, bench, simulate, plan")
}

// TestAdminCommandsSaySo: the short help of each command that needs an
// admin key says so.
func TestAdminCommandsSaySo(t *testing.T) {
	root := newRootCmd()
	for _, path := range [][]string{{"stats"}, {"nodes"}, {"keys"}, {"tenants"}, {"quota"}, {"usage"}, {"top"},
		{"models", "list"}, {"models", "load"}, {"models", "unload"}, {"models", "canary"}, {"models", "promote"}} {
		cmd, _, err := root.Find(path)
		require.NoError(t, err)
		require.Contains(t, cmd.Short, "needs an admin key", strings.Join(path, " "))
	}
}

// TestStandaloneHelp: simulate, which never calls llmd, does not offer
// --addr or --api-key; the other commands do (plan for --from-cluster).
func TestStandaloneHelp(t *testing.T) {
	for _, c := range []string{"simulate"} {
		out, _, err := runCmd(t, "", c, "--help")
		require.NoError(t, err)
		require.NotContains(t, out, "--addr")
		require.NotContains(t, out, "--api-key")
		require.Contains(t, out, "--json")
	}
	out, _, err := runCmd(t, "", "models", "--help")
	require.NoError(t, err)
	require.Contains(t, out, "--addr")
	out, _, err = runCmd(t, "", "plan", "--help")
	require.NoError(t, err)
	require.Contains(t, out, "--addr")
	require.Contains(t, out, "--from-cluster")
	out, _, err = runCmd(t, "", "--help")
	require.NoError(t, err)
	for _, c := range newRootCmd().Commands() {
		if !c.Hidden {
			require.Contains(t, out, "\n  "+c.Name()+" ", "root help lists %s", c.Name())
		}
	}
}

// TestSimulateRoutePolicy: simulate names the policy as llmd does; the old
// --route still works, with a warning.
func TestSimulateRoutePolicy(t *testing.T) {
	args := []string{"simulate", "--nodes", "2", "--rate", "2", "--duration", "5s", "--input", "64", "--output", "8", "--json"}
	out, _, err := runCmd(t, "", append(args, "--route-policy", "round_robin")...)
	require.NoError(t, err)
	require.Contains(t, out, `"route": "round_robin"`)
	_, errOut, err := runCmd(t, "", append(args, "--route", "least_loaded")...)
	require.NoError(t, err)
	require.Contains(t, errOut, "--route is deprecated, use --route-policy")
	_, _, err = runCmd(t, "", append(args, "--route-policy", "bogus")...)
	require.ErrorContains(t, err, "bogus")
}
