package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseBackground(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		in       string
		dark, ok bool
	}{
		"xterm black":     {in: "\x1b]11;rgb:0000/0000/0000\x1b\\", dark: true, ok: true},
		"white, BEL":      {in: "\x1b]11;rgb:ffff/ffff/ffff\a", dark: false, ok: true},
		"solarized light": {in: "\x1b]11;rgb:fdfd/f6f6/e3e3\x1b\\\x1b[12;1R", dark: false, ok: true},
		"two-digit dark":  {in: "junk\x1b]11;rgb:28/2c/34\x1b\\", dark: true, ok: true},
		"cursor only":     {in: "\x1b[12;1R"},
		"partial":         {in: "\x1b]11;rgb:ff"},
		"nothing":         {in: ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dark, ok := parseBackground([]byte(tc.in))
			require.Equal(t, tc.ok, ok)
			if ok {
				require.Equal(t, tc.dark, dark)
			}
		})
	}
}
