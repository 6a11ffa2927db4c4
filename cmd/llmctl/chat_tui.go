package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/spf13/cobra"

	"github.com/llmd/llmd/tui"
)

// chatTUI runs the interactive chat as a full-screen terminal UI: used when
// both stdin and stdout are terminals. When it ends, the conversation is
// written to stdout as plain text, so it stays in the terminal's
// scrollback.
func (a *app) chatTUI(cmd *cobra.Command, c *chatter) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	m := tui.NewChat(a.client, tui.ChatOptions{
		Request:   c.req,
		System:    c.system,
		Tenant:    a.keyTenant(ctx),
		ErrorText: errorText(a.apiError),
	}, tui.DefaultStyles(newRenderer(out)), tui.DefaultKeyMap())
	p := tea.NewProgram(m, tea.WithAltScreen(), tea.WithContext(ctx),
		tea.WithInput(cmd.InOrStdin()), tea.WithOutput(out))
	_, err := p.Run()
	m.Close()
	if t := m.Transcript(); t != "" {
		fmt.Fprint(out, t)
	}
	return programError(cmd, err)
}

// keyTenant names the tenant the API key acts for, for the chat's status
// line: "local" without a key (llmd serves anonymous requests as the local
// tenant); the key's tenant when the key may list the keys (an admin key);
// else the key's id, which is all llmctl can tell about it.
func (a *app) keyTenant(ctx context.Context) string {
	if a.apiKey == "" {
		return "local"
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	keys, err := a.client.Keys(ctx)
	if err == nil {
		for _, k := range keys {
			if k.ID != "" && strings.HasPrefix(a.apiKey, k.ID) {
				return k.Tenant
			}
		}
	}
	if id := keyIDOf(a.apiKey); id != "" {
		return "key " + id
	}
	return "unknown"
}

// keyIDOf returns the id of an llmd API key: "llmd-" and the next 7
// characters, as "llmctl keys list" shows it; "" for a key of another
// shape, of which nothing may be shown.
func keyIDOf(key string) string {
	const prefix = "llmd-"
	const idLen = len(prefix) + 7
	if !strings.HasPrefix(key, prefix) || len(key) <= idLen {
		return ""
	}
	return key[:idLen]
}
