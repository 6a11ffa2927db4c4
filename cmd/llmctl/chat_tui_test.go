package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmd/llmd/api"
)

func TestKeyTenant(t *testing.T) {
	srv := newFakeAdmin(t, &fakeAdmin{})
	for name, tc := range map[string]struct {
		key  string
		want string
	}{
		"no key":          {"", "local"},
		"admin key":       {adminKey, "default"},
		"non-admin key":   {userKey, "key llmd-USER000"},
		"unknown shape":   {"sk-0123456789abcdef", "unknown"},
		"key llmd denies": {"llmd-WRONG001.wrong-s3cr3t", "key llmd-WRONG00"},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := api.NewClient(srv.URL, nil)
			require.NoError(t, err)
			c.SetAPIKey(tc.key)
			a := &app{base: srv.URL, apiKey: tc.key, client: c}
			got := a.keyTenant(context.Background())
			require.Equal(t, tc.want, got)
			require.NotContains(t, got, "s3cr3t")
		})
	}
}

// TestChatPlainWithoutTerminal: with stdout not a terminal the chat keeps
// its plain streaming, also for an interactive-looking invocation.
func TestChatPlainWithoutTerminal(t *testing.T) {
	f := &fakeLLMD{}
	srv := newFakeLLMD(t, f)
	var stdout, stderr bytes.Buffer
	code := execute(t.Context(), []string{"--addr", srv.URL, "chat", "-m", "sim/small", "hi"},
		strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	require.Equal(t, "Hello world\n", stdout.String())
	require.NotContains(t, stdout.String(), "\x1b")
}
