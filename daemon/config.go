package daemon

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/cpu"
	modelfile "github.com/llmd/llmd/model"
	"github.com/llmd/llmd/quota"
	"github.com/llmd/llmd/safety"
	"github.com/llmd/llmd/server"
)

// Config configures a Server. Start from DefaultConfig; cmd/llmd fills it
// from flags and the environment.
type Config struct {
	// Listen is the TCP address the API listens on. It must be a loopback
	// address (127.0.0.0/8, ::1 or localhost) while no API key exists,
	// unless Insecure is set. Port 0 picks a free port (see Server.Listen).
	// Default "127.0.0.1:8700".
	Listen string
	// Insecure allows a non-loopback Listen address while no API key
	// exists: anyone who reaches the port acts as the local tenant.
	Insecure bool
	// Anonymous serves requests without a key as the local tenant even
	// once API keys have been made (without it, a node that has ever had a
	// key stays closed to them, even when every key is revoked). Refused
	// with a non-loopback Listen.
	Anonymous bool
	// GPU is the simulated GPU each model replica runs on, e.g. "h100".
	// Default "h100".
	GPU string
	// TP is the tensor-parallel degree: the number of GPUs in each model's
	// group. Default 1.
	TP int
	// Models are the simulated model profiles to serve, by name ("small",
	// "mid", "flagship"; the "sim/" prefix is optional). Each is its own
	// engine replica on its own GPU group. Default small, mid and flagship.
	Models []string
	// ModelFiles are GGUF models to load: file paths, directories, or
	// "ollama:NAME[:TAG]" for a model in the Ollama store (resolved with
	// Resolve). Each is served by its own CPU executor.
	ModelFiles []string
	// Upstreams are models served through OpenAI-compatible engines on the
	// node (vLLM, SGLang, llama.cpp's server, another llmd), with llmd's
	// queue, quotas and relay in front (package upstream).
	Upstreams []UpstreamSpec
	// ModelsDir is a directory whose *.gguf files are loaded like
	// ModelFiles.
	ModelsDir string
	// Resolve is the environment for resolving ModelFiles ($OLLAMA_MODELS,
	// $HOME), filled in by cmd/llmd.
	Resolve modelfile.ResolveEnv
	// CPUThreads is the number of threads of each GGUF model's CPU
	// executor; 0 means one per core.
	CPUThreads int
	// KVCacheBytes sizes each GGUF model's KV cache; 0 means the CPU
	// executor's default (256 MiB).
	KVCacheBytes int64
	// KVCacheType is what each GGUF model's KV cache stores keys and
	// values as (cpu.KVTypes: llama.cpp's -ctk/-ctv names f16, f32, q8_0,
	// q4_0); "" means the CPU executor's default, f16. The same
	// KVCacheBytes holds about twice the blocks at q8_0 and 3.5 times at
	// q4_0; models whose head dims are not multiples of 32 fail to load
	// with a quantized type.
	KVCacheType string
	// CPUF16MatMul is how each GGUF model's CPU executor multiplies F16 and
	// BF16 weights (cpu.F16MatMuls): "" or "f32" exactly in float32,
	// "bf16" rounded to bfloat16 with the CPU's AVX512_BF16 dot products
	// (about 1.5 times the prompt rate; refused on a CPU without them).
	CPUF16MatMul string
	// Speculative selects speculative decoding for every model: "" or
	// SpecOff (none), SpecNgram (prompt lookup, no model) or SpecDraft (the
	// DraftModel file drafts for each GGUF model, which must share its
	// vocabulary). A simulated model drafts with its configured acceptance
	// rate in both modes, with the draft model's cost in SpecDraft.
	// Engine.Spec's MaxTokens and MaxBatch bound it.
	Speculative string
	// DraftModel is the draft model's GGUF file for SpecDraft.
	DraftModel string
	// ModelsConfig is the models config file (YAML: versions, aliases,
	// canaries, shadows, routers; see package catalog), read at start and
	// again on SIGHUP and `llmctl models apply`. "" for none.
	ModelsConfig string
	// Safety, when its URL is set, checks every request's input with the
	// operator's classifier (see package safety): allow, flag or block.
	Safety safety.Config
	// MemoryBudget bounds the host memory accounted to GGUF models (file
	// plus KV cache) loaded while llmd runs: a load past it is refused. 0
	// checks each load against the host's available memory instead.
	MemoryBudget int64
	// UnloadTimeout is how long an unloaded model's running requests may
	// take to finish before they are cancelled. Default 60s.
	UnloadTimeout time.Duration
	// LoadProgress, if set, is called before each GGUF model loads (done of
	// total loaded so far, and the next one's name) and once at the end
	// (done == total, name ""). cmd/llmd draws a progress bar with it.
	LoadProgress func(done, total int, name string)
	// DataDir is llmd's data directory, which holds its SQLite store
	// (tenants, API keys, quotas); New creates it. "" runs without one:
	// only the local tenant, no keys, no quotas. Default "" (cmd/llmd
	// resolves the user's data directory).
	DataDir string
	// Autoscale are the targets of the autoscaling signal
	// (llmd_desired_replicas); the zero value takes the defaults.
	Autoscale AutoscaleTargets
	// RedisURL, if set, keeps the quota buckets in Redis (shared by every
	// llmd that uses the same Redis) instead of in memory.
	RedisURL string
	// QuotaTimeout bounds each Redis quota call; past it (or with Redis
	// down) a local bucket decides. Default 25ms.
	QuotaTimeout time.Duration
	// HotTenantRPS, with RedisURL, detects hot tenants: a tenant with one
	// quota bucket that sends more than this many requests within one
	// second is split into HotTenantShards sub-buckets by the Redis script
	// itself (see package quota). Default 0: off.
	HotTenantRPS int64
	// HotTenantShards is the sub-buckets of a tenant detected hot, 2 to
	// quota.MaxShards. Default quota.DefaultHotShards (8).
	HotTenantShards int
	// QuotaEstimate reserves, instead of max_tokens, the tenant's learned
	// answer length (the p90 of its last 64 answers, once it has 8) capped
	// by max_tokens; a longer answer is charged when it ends.
	QuotaEstimate bool
	// QuotaShadow evaluates quotas and logs refusals but admits every
	// request (to try limits out on live traffic).
	QuotaShadow bool
	// DegradeRoutes maps a model to the smaller model that serves its
	// free-tier requests while its degradation ladder is at limit_free or
	// above, e.g. {"sim/flagship": "sim/small"}.
	DegradeRoutes map[string]string
	// NodeID names this llmd in usage rows, logs and the cluster.
	// Default: the host name.
	NodeID string
	// Cluster, if set, joins a cluster (membership and load gossip).
	Cluster *ClusterConfig
	// Prices are per model, per million tokens, for usage reports' costs.
	Prices map[string]Price
	// GPUHourPrice is the price of one GPU for one hour, for the cost per
	// million output tokens; 0 leaves that figure out.
	GPUHourPrice float64
	// Currency names the prices' currency. Default "USD".
	Currency string
	// DegradeFreeMaxTokens caps free-tier max_tokens from limit_free up;
	// 0 leaves it alone. Default 256.
	DegradeFreeMaxTokens int
	// HeartbeatInterval is how long a stream may stay silent before the
	// server writes an SSE comment (": ping"). Default 15s.
	HeartbeatInterval time.Duration
	// StreamWriteTimeout bounds each write (and flush) to a streaming
	// client; a client that does not take an event within it is dropped
	// and its request cancelled. Default 10s.
	StreamWriteTimeout time.Duration
	// StallTimeout ends a request with an error once it has produced no
	// new token for this long after its first (heartbeats do not count).
	// Default 60s.
	StallTimeout time.Duration
	// ResumeGrace is how long a resumable stream keeps generating with no
	// client attached before it is cancelled. Default 60s.
	ResumeGrace time.Duration
	// ResumeTTL is how long a resumable stream's events stay readable
	// after it ends. Default 5m.
	ResumeTTL time.Duration
	// ResumeMaxBytes and ResumeMaxEvents bound the events kept per stream;
	// past them the oldest go (resuming before them is refused). Defaults
	// 4 MiB and 65536.
	ResumeMaxBytes  int
	ResumeMaxEvents int
	// MaxClientLagTime is how long a streaming client may fall behind (the
	// age of the oldest event it has not taken) before its connection is
	// closed (it can resume). Default 30s.
	MaxClientLagTime time.Duration
	// MaxClientLag is how many bytes of events a client may fall behind
	// before its connection is closed (it can resume). Default 1 MiB.
	MaxClientLag int
	// MaxBodyBytes is the largest request body accepted; larger bodies get
	// 413. Default 8 MiB.
	MaxBodyBytes int64
	// MaxN is the most choices (the "n" parameter) one request may ask
	// for. Default 8.
	MaxN int
	// BodyTimeout bounds reading a whole request, headers and body: a
	// client that trickles its body is cut. Default 30s.
	BodyTimeout time.Duration
	// IdleTimeout closes a kept-alive connection idle this long.
	// Default 30s.
	IdleTimeout time.Duration
	// MaxConnections and MaxClientConnections bound the open connections,
	// in all and from one IP address; past them a connection gets 503 (or
	// is closed, with TLS). 0 means no bound. Defaults 16384 and 1024.
	MaxConnections       int
	MaxClientConnections int
	// SendBufferBytes is each connection's socket send buffer, so that a
	// slow reader holds writes back early (and is cut by the write
	// timeout) instead of hiding megabytes in the kernel. 0 leaves the
	// system's. Default 64 KiB.
	SendBufferBytes int
	// AllowedHosts are host names, besides IP addresses, loopback names and
	// the listen address's host, that anonymous requests may name in their
	// Host header (a defence against DNS rebinding).
	AllowedHosts []string
	// CORSOrigins are the origins a browser page may call llmd from;
	// without any, cross-origin requests may read nothing and change
	// nothing.
	CORSOrigins []string
	// TLSCertFile and TLSKeyFile serve HTTPS with this certificate and key
	// (PEM), reloaded by ReloadTLS (SIGHUP). CAFile, when set, is the CA
	// that peers' certificates are checked against when forwarding (else
	// the system's roots); in a cluster, every node serves TLS or none.
	TLSCertFile, TLSKeyFile string
	CAFile                  string
	// ReadHeaderTimeout is the http.Server's ReadHeaderTimeout: a client
	// that does not send its headers within it is disconnected. Default 5s.
	ReadHeaderTimeout time.Duration
	// ShutdownTimeout is how long Run waits, once its context ends, for
	// in-flight requests to finish before it cancels them. Default 30s.
	ShutdownTimeout time.Duration
	// Engine configures each model's engine. Default engine.DefaultConfig().
	Engine engine.Config
	// Clock drives the engines and the simulated executors. nil means the
	// real clock; tests may pass a virtual clock.
	Clock engine.Clock
	// StepTimeScale scales the simulated step time: 1 is the roofline time
	// of the configured GPU, 0.01 a hundred times faster. Tests shrink it.
	// Default 1.
	StepTimeScale float64
}

// Price is what a million tokens of a model cost (see server.Price).
type Price = server.Price

// DefaultConfig returns the documented defaults: a simulated H100 per model
// serving the small, mid and flagship profiles on 127.0.0.1:8700.
func DefaultConfig() Config {
	return Config{
		Listen:               "127.0.0.1:8700",
		GPU:                  "h100",
		TP:                   1,
		Models:               []string{"small", "mid", "flagship"},
		HeartbeatInterval:    15 * time.Second,
		StreamWriteTimeout:   10 * time.Second,
		MaxBodyBytes:         8 << 20,
		MaxN:                 8,
		ReadHeaderTimeout:    5 * time.Second,
		ShutdownTimeout:      30 * time.Second,
		UnloadTimeout:        60 * time.Second,
		Engine:               engine.DefaultConfig(),
		Speculative:          SpecOff,
		StepTimeScale:        1,
		QuotaTimeout:         25 * time.Millisecond,
		HotTenantShards:      quota.DefaultHotShards,
		StallTimeout:         60 * time.Second,
		Autoscale:            AutoscaleTargets{KVUsage: 0.8, Waiting: 4, TTFT: 2 * time.Second},
		ResumeGrace:          60 * time.Second,
		ResumeTTL:            5 * time.Minute,
		ResumeMaxBytes:       4 << 20,
		ResumeMaxEvents:      65536,
		MaxClientLag:         1 << 20,
		MaxClientLagTime:     30 * time.Second,
		BodyTimeout:          30 * time.Second,
		IdleTimeout:          30 * time.Second,
		MaxConnections:       16384,
		MaxClientConnections: 1024,
		SendBufferBytes:      64 << 10,
		DegradeFreeMaxTokens: 256,
		Currency:             "USD",
	}
}

// Validate reports the first problem with c, if any.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("daemon: listen address %q: %w", c.Listen, err)
	}
	if c.DataDir == "" && !c.Insecure && !isLoopback(c.Listen) {
		return fmt.Errorf("daemon: listen address %q is not a loopback address and llmd runs without a data "+
			"directory, so it has no API keys: anyone who reaches the port could use the models; listen on "+
			"127.0.0.1, set a data directory and create a key, or pass --insecure", c.Listen)
	}
	if c.Anonymous && !isLoopback(c.Listen) {
		return fmt.Errorf("daemon: anonymous access (--anonymous) is for a loopback listen address; %q is not: "+
			"use API keys (llmctl keys create)", c.Listen)
	}
	var errs []error
	if c.GPU == "" {
		errs = append(errs, errors.New("gpu is empty"))
	}
	if c.TP < 1 {
		errs = append(errs, fmt.Errorf("tp is %d; it must be at least 1", c.TP))
	}
	if len(c.Models) == 0 && len(c.ModelFiles) == 0 && c.ModelsDir == "" && c.ModelsConfig == "" && len(c.Upstreams) == 0 {
		errs = append(errs, errors.New("no models to serve"))
	}
	seen := map[string]bool{}
	for _, m := range c.Models {
		name := ModelName(m)
		switch {
		case name == "":
			errs = append(errs, errors.New("empty model name"))
		case seen[name]:
			errs = append(errs, fmt.Errorf("model %q listed twice", m))
		}
		seen[name] = true
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"heartbeat interval", c.HeartbeatInterval},
		{"stream write timeout", c.StreamWriteTimeout},
		{"body timeout", c.BodyTimeout},
		{"idle timeout", c.IdleTimeout},
		{"read header timeout", c.ReadHeaderTimeout},
		{"shutdown timeout", c.ShutdownTimeout},
		{"unload timeout", c.UnloadTimeout},
		{"stall timeout", c.StallTimeout},
		{"resume grace", c.ResumeGrace},
		{"resume ttl", c.ResumeTTL},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s is %v; it must be positive", d.name, d.v))
		}
	}
	if c.MaxBodyBytes <= 0 {
		errs = append(errs, fmt.Errorf("max body bytes is %d; it must be positive", c.MaxBodyBytes))
	}
	if c.CPUThreads < 0 {
		errs = append(errs, fmt.Errorf("cpu threads is %d; it must not be negative", c.CPUThreads))
	}
	if c.MemoryBudget < 0 {
		errs = append(errs, fmt.Errorf("memory budget is %d bytes; it must not be negative", c.MemoryBudget))
	}
	if c.KVCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("kv cache size is %d bytes; it must not be negative", c.KVCacheBytes))
	}
	if err := (cpu.Config{KVType: c.KVCacheType}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("kv cache type: %w", err))
	}
	if err := (cpu.Config{F16MatMul: c.CPUF16MatMul}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("cpu f16 matmul: %w", err))
	}
	if err := c.checkSpeculative(); err != nil {
		errs = append(errs, err)
	}
	if c.ResumeMaxBytes < 1 || c.ResumeMaxEvents < 1 || c.MaxClientLag < 1 {
		errs = append(errs, errors.New("resume buffer bounds and the client lag must be positive"))
	}
	if c.QuotaTimeout <= 0 {
		errs = append(errs, fmt.Errorf("quota timeout is %v; it must be positive", c.QuotaTimeout))
	}
	if c.HotTenantRPS < 0 || c.HotTenantRPS > quota.MaxRate {
		errs = append(errs, fmt.Errorf("hot tenant rate is %d requests/s; it must be 0 (off) to %d", c.HotTenantRPS, quota.MaxRate))
	}
	if c.HotTenantRPS > 0 && (c.HotTenantShards < 2 || c.HotTenantShards > quota.MaxShards) {
		errs = append(errs, fmt.Errorf("hot tenant shards is %d; it must be 2 to %d", c.HotTenantShards, quota.MaxShards))
	}
	if c.HotTenantRPS > 0 && c.RedisURL == "" {
		errs = append(errs, errors.New("detecting hot tenants (--hot-tenant-rps) needs the quota in Redis (--redis)"))
	}
	if c.MaxClientLagTime < 0 || c.MaxConnections < 0 || c.MaxClientConnections < 0 || c.SendBufferBytes < 0 {
		errs = append(errs, errors.New("the client lag in time, the connection limits and the send buffer must not be negative"))
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, errors.New("TLS needs both a certificate and a key file"))
	}
	for m, p := range c.Prices {
		if !(p.Input >= 0 && p.Cached >= 0 && p.Output >= 0) {
			errs = append(errs, fmt.Errorf("price of model %q must not be negative", m))
		}
	}
	if !(c.GPUHourPrice >= 0) {
		errs = append(errs, fmt.Errorf("GPU-hour price is %v; it must not be negative", c.GPUHourPrice))
	}
	if c.DegradeFreeMaxTokens < 0 {
		errs = append(errs, fmt.Errorf("degraded free-tier max tokens is %d; it must not be negative", c.DegradeFreeMaxTokens))
	}
	for from, to := range c.DegradeRoutes {
		if from == "" || to == "" || from == to {
			errs = append(errs, fmt.Errorf("degrade route %q -> %q: both models must be named and differ", from, to))
		}
	}
	if c.MaxN < 1 {
		errs = append(errs, fmt.Errorf("max n is %d; it must be at least 1", c.MaxN))
	}
	if !(c.StepTimeScale > 0) {
		errs = append(errs, fmt.Errorf("step time scale is %v; it must be positive", c.StepTimeScale))
	}
	if err := c.Engine.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("daemon: invalid config: %w", err)
	}
	return nil
}

// ModelName returns the profile name of a simulated model given as "small"
// or "sim/small".
func ModelName(m string) string {
	return strings.TrimPrefix(strings.TrimSpace(m), "sim/")
}

// isLoopback reports whether addr's host is a loopback address
// (127.0.0.0/8, ::1 or localhost).
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
