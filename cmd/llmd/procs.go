package main

import (
	"log/slog"
	"runtime"
)

// spareProcs gives the Go scheduler one P more than the CPU executor's
// threads when those would otherwise hold every P (the default: one
// thread per core, GOMAXPROCS one per core). The executor's pool runs a
// forward step as hundreds of barriers, each waiting for all its threads;
// with no P to spare, an HTTP handler, or a goroutine in a system call or
// cgo call (the usage writer's SQLite commits and their fsyncs), holds one
// of the pool's Ps until it returns or sysmon takes the P back, and the
// whole barrier waits. The extra P runs that work beside the pool; the
// operating system shares the cores, so it costs only the CPU time that
// work takes. An explicit GOMAXPROCS in the environment is left alone.
func spareProcs(cpuThreads int, getenv func(string) string, logger *slog.Logger) {
	if getenv("GOMAXPROCS") != "" {
		return
	}
	cur := runtime.GOMAXPROCS(0)
	if n := procsFor(cpuThreads, runtime.NumCPU(), cur); n != cur {
		runtime.GOMAXPROCS(n)
		logger.Debug("GOMAXPROCS raised beside the CPU executor's threads", "from", cur, "to", n)
	}
}

// procsFor is the GOMAXPROCS for executors of cpuThreads threads (0: one
// per CPU) on numCPU CPUs when it is procs now: threads+1 if procs is
// below that, else procs.
func procsFor(cpuThreads, numCPU, procs int) int {
	threads := cpuThreads
	if threads <= 0 {
		threads = numCPU
	}
	return max(procs, threads+1)
}
