//go:build race

package cluster

// raceEnabled: the race detector slows memberlist's packet handling about
// tenfold, so the biggest clusters in these tests run with longer timings.
const raceEnabled = true
