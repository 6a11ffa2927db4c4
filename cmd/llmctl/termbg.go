package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/term"
)

// backgroundTimeout bounds the wait for the terminal's answer to the
// background-colour query: a terminal that answers does so within a few
// milliseconds, and one that does not must not delay the first frame
// (termenv's own query waits 5 s per attempt).
const backgroundTimeout = 150 * time.Millisecond

// backgroundEnv names the variable that sets the background (dark or
// light) without asking the terminal.
const backgroundEnv = "LLMCTL_BACKGROUND"

// newRenderer returns the lipgloss renderer of a full-screen program on
// out, with the terminal's background (dark or light, for the adaptive
// colours) settled before the program draws: $LLMCTL_BACKGROUND, else the
// terminal's answer within backgroundTimeout, else dark. lipgloss's default
// renderer gets the same, so that nothing asks the terminal again.
func newRenderer(out io.Writer) *lipgloss.Renderer {
	r := lipgloss.NewRenderer(out)
	dark := true
	switch os.Getenv(backgroundEnv) {
	case "light":
		dark = false
	case "dark":
	default:
		if isTerminalWriter(out) {
			if d, err := queryDarkBackground(backgroundTimeout); err == nil {
				dark = d
			}
		}
	}
	r.SetHasDarkBackground(dark)
	lipgloss.SetHasDarkBackground(dark)
	return r
}

// errNoAnswer is returned by queryDarkBackground when the terminal does
// not say its background colour in time.
var errNoAnswer = errors.New("the terminal did not report its background colour")

// queryDarkBackground asks the controlling terminal for its background
// colour (OSC 11), followed by a cursor-position request that every
// terminal answers, and reads the answers for at most timeout.
func queryDarkBackground(timeout time.Duration) (bool, error) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return false, err
	}
	defer tty.Close()
	// Not tty.Fd(): it would put the file in blocking mode, where read
	// deadlines do nothing.
	rc, err := tty.SyscallConn()
	if err != nil {
		return false, err
	}
	var state *term.State
	if cerr := rc.Control(func(fd uintptr) { state, err = term.MakeRaw(fd) }); cerr != nil {
		return false, cerr
	}
	if err != nil {
		return false, err
	}
	defer func() { _ = rc.Control(func(fd uintptr) { _ = term.Restore(fd, state) }) }()
	if _, err := io.WriteString(tty, "\x1b]11;?\x1b\\\x1b[6n"); err != nil {
		return false, err
	}
	// A /dev/tty opened here is pollable, so the deadline holds.
	if err := tty.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return false, err
	}
	var got []byte
	buf := make([]byte, 256)
	for len(got) < 4096 {
		n, err := tty.Read(buf)
		got = append(got, buf[:n]...)
		if dark, ok := parseBackground(got); ok {
			return dark, nil
		}
		if cursorReport.Match(got) || err != nil {
			// The cursor position came back without a colour first: the
			// terminal does not answer OSC 11.
			return false, errNoAnswer
		}
	}
	return false, errNoAnswer
}

var (
	oscBackground = regexp.MustCompile(`\x1b\]11;rgba?:([0-9a-fA-F]{1,4})/([0-9a-fA-F]{1,4})/([0-9a-fA-F]{1,4})`)
	cursorReport  = regexp.MustCompile(`\x1b\[\d+;\d+R`)
)

// parseBackground finds an OSC 11 answer in b and reports whether the
// colour is dark (HSL lightness under one half).
func parseBackground(b []byte) (dark, ok bool) {
	i := bytes.Index(b, []byte("\x1b]11;"))
	if i < 0 {
		return false, false
	}
	m := oscBackground.FindSubmatch(b[i:])
	if m == nil {
		return false, false
	}
	var c [3]float64
	for k := range c {
		v, err := strconv.ParseUint(string(m[k+1]), 16, 32)
		if err != nil {
			return false, false
		}
		c[k] = float64(v) / float64(uint64(1)<<(4*len(m[k+1]))-1)
	}
	lightness := (max(c[0], c[1], c[2]) + min(c[0], c[1], c[2])) / 2
	return lightness < 0.5, true
}
