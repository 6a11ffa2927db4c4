// Command llmd is the llmd daemon: it serves models over the
// OpenAI-compatible API and llmd's native streaming API.
//
// With no flags it listens on 127.0.0.1:8700 and serves the embedded
// default: the SIMULATED executor (a roofline cost model, no weights) on one
// simulated H100 per model, for the sim/small, sim/mid and sim/flagship
// profiles. Each setting comes from its flag, else an LLMD_* environment
// variable, else the default (see llmd --help). SIGINT or SIGTERM drains and
// stops it; the exit status is then 0.
//
// Exit status: 0 after a clean stop, 1 on an error, 2 on a usage error.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(execute(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}
