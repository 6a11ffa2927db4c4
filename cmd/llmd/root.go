package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/daemon"
	"github.com/llmd/llmd/engine"
	"github.com/llmd/llmd/engine/cpu"
	"github.com/llmd/llmd/safety"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError is a bad flag or environment value; it exits with exitUsage.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// execute runs llmd with args and returns the exit status, having printed
// any error to stderr as one "llmd: ..." line.
func execute(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	root := newRootCmd(getenv)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "llmd: %v\n", err)
	if ue := (*usageError)(nil); errors.As(err, &ue) {
		return exitUsage
	}
	return exitFailure
}

// options are llmd's settings before they become a daemon.Config.
type options struct {
	listen     string
	gpu        string
	tp         int
	models     []string
	modelFiles []string
	modelsDir  string
	cpuThreads int
	kvCacheMiB int
	kvType     string
	f16MatMul  string
	// Speculative decoding.
	speculative, draftModel  string
	specTokens, specMaxBatch int
	// memoryBudgetMiB, unloadTimeout and modelsConfig manage models
	// loaded while llmd runs.
	memoryBudgetMiB int64
	// safetyURL, safetyTimeout and safetyPolicy configure the safety check.
	safetyURL     string
	safetyTimeout time.Duration
	safetyPolicy  string
	safetyEvery   int
	upstreams     []string
	upTokenizers  []string
	upMaxWaiting  int
	upMaxKV       float64
	safetyAtEnd   bool
	unloadTimeout time.Duration
	modelsConfig  string
	dataDir       string
	logLevel      string
	logFormat     string
	heartbeat     time.Duration
	// fs is the flag set bound to o, to tell a given flag from a default.
	fs *pflag.FlagSet
	// engine settings
	maxBatchTokens int
	maxRunning     int
	expectedOutput int
	prefixCache    bool
	tierWeights    []string
	// access and quotas
	insecure     bool
	anonymous    bool
	allowedHosts []string
	corsOrigins  []string
	tlsCert      string
	tlsKey       string
	caCert       string
	// connections
	bodyTimeout    time.Duration
	idleTimeout    time.Duration
	maxConns       int
	maxClientConns int
	maxClientLag   time.Duration
	redis          string
	quotaTimeout   time.Duration
	hotTenantRPS   int64
	hotShards      int
	quotaShadow    bool
	quotaEstimate  bool
	degradeRoutes  []string
	degradeMax     int
	degradeWait    time.Duration
	noDegrade      bool
	configFile     string
	nodeID         string
	stallTimeout   time.Duration
	resumeGrace    time.Duration
	drainTimeout   time.Duration
	// cluster
	join           []string
	gossipAddr     string
	gossipKey      string
	insecureGossip bool
	advertiseAPI   string
	// gossipProfile is the hidden --gossip-profile: memberlist timings,
	// "lan" (default) or "local" (tests and scripts/netns-partition.sh).
	gossipProfile    string
	routePolicy      string
	loadBound        float64
	loadSlack        int
	retryJoinMax     int
	zone             string
	role             string
	disaggMinPrompt  int
	disaggBusy       int
	disaggTimeout    time.Duration
	autoscaleKV      float64
	autoscaleWaiting float64
	autoscaleTTFT    time.Duration
	fallbacks        []string
	forwardTimeout   time.Duration
}

// newRootCmd builds the llmd command. getenv is os.Getenv, or a map lookup
// in tests.
func newRootCmd(getenv func(string) string) *cobra.Command {
	o := &options{}
	cmd := &cobra.Command{
		Use:   "llmd",
		Short: "Serve language models over an OpenAI-compatible HTTP API",
		Long: `llmd serves language models over the OpenAI-compatible API (/v1/chat/completions,
/v1/completions, /v1/models) and llmd's native streaming API (/v1/chat).

With no flags it listens on 127.0.0.1:8700 and serves the SIMULATED executor (a
roofline cost model of a GPU, no model weights: model ids start with "sim/") on one
simulated H100 per model, for the small, mid and flagship profiles. --model loads
GGUF files (or ollama:NAME from the Ollama store) instead and runs them on the
CPU executor.

Every flag can also be set with its environment variable, shown after it as
[$LLMD_...]: LLMD_ and the flag's name in capitals, "-" as "_". A flag wins over
the environment. Lists (--models, --join, --fallback-model, --degrade-route,
--allowed-host, ...) are repeatable flags or comma-separated values, and
comma-separated in the environment; --model, --upstream and
--upstream-tokenizer, whose values may hold commas, are repeated flags and one
value per line in the environment.

Access: until the first API key is made, requests without a key act as the
built-in "local" tenant, and llmd refuses a non-loopback --listen (unless
--insecure). Create the first admin key with "llmctl keys create --admin"
(against this llmd, or offline with --data-dir). From then on every request needs
a key, even if every key is revoked later, unless --anonymous (loopback only).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.NoArgs(cmd, args); err != nil {
				return &usageError{err}
			}
			return nil
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd.Flags(), getenv); err != nil {
				return &usageError{err}
			}
			return serve(cmd.Context(), *o, getenv, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	o.bind(cmd.Flags())
	annotateEnv(cmd.Flags())
	return cmd
}

// bind defines llmd's flags on fs, storing into o.
func (o *options) bind(fs *pflag.FlagSet) {
	o.fs = fs
	def := daemon.DefaultConfig()
	fs.StringVar(&o.listen, "listen", def.Listen, "address to listen on; loopback only until an API key exists (see --insecure)")
	fs.StringVar(&o.gpu, "gpu", def.GPU, "simulated GPU of each model replica: h100, h200, a100 or l40s")
	fs.IntVar(&o.tp, "tp", def.TP, "tensor-parallel degree: GPUs per model replica")
	fs.StringSliceVar(&o.models, "models", def.Models, "simulated model profiles to serve (comma-separated): small, mid, flagship")
	fs.StringArrayVar(&o.modelFiles, "model", nil, "a GGUF model to load: a file, a directory, or ollama:NAME[:TAG] from the Ollama store "+
		"(repeatable; replaces the default simulated models unless --models is given)")
	fs.StringVar(&o.modelsDir, "models-dir", "", "a directory of GGUF models to load")
	fs.IntVar(&o.cpuThreads, "cpu-threads", 0, "threads of each GGUF model's CPU executor (0: one per core)")
	fs.IntVar(&o.kvCacheMiB, "kv-cache-mib", 0, "KV cache size of each GGUF model in MiB (0: 256)")
	fs.StringVar(&o.kvType, "kv-cache-type", "", "what each GGUF model's KV cache stores keys and values as: "+
		strings.Join(cpu.KVTypes, ", ")+" (empty: "+cpu.KVTypes[0]+"; q8_0 holds about twice the tokens of f16 in the same memory, "+
		"q4_0 about 3.5 times; quantized types need head dims that are multiples of 32)")
	fs.StringVar(&o.f16MatMul, "cpu-f16-matmul", "", "how GGUF models multiply F16 and BF16 weights: "+
		strings.Join(cpu.F16MatMuls, ", ")+" (empty: "+cpu.F16MatMuls[0]+", exact in float32; bf16 rounds weights and activations to bfloat16 "+
		"and uses the CPU's AVX512_BF16 dot products, about 1.5 times the prompt rate, refused on CPUs without them)")
	fs.StringVar(&o.speculative, "speculative", def.Speculative,
		"speculative decoding: off, ngram (prompt lookup: drafts copied from the prompt and output, no model) or draft (--draft-model drafts); "+
			"pays at low load on output that repeats its input or a draft that agrees with the model")
	fs.StringVar(&o.draftModel, "draft-model", "",
		"a small GGUF model with the same vocabulary that drafts for every GGUF model (with --speculative draft)")
	fs.IntVar(&o.specTokens, "spec-tokens", def.Engine.Spec.MaxTokens,
		fmt.Sprintf("most draft tokens verified per sequence and step (1 to %d); each sequence's draft length adapts to its acceptance rate", engine.MaxSpecTokens))
	fs.IntVar(&o.specMaxBatch, "spec-max-batch", def.Engine.Spec.MaxBatch,
		"speculate only while at most this many sequences run: larger batches are compute-bound and drafts stop paying")
	fs.Int64Var(&o.memoryBudgetMiB, "memory-budget-mib", 0,
		"host memory in MiB that GGUF models loaded while llmd runs may take in all (0: each load is checked against the available memory)")
	fs.DurationVar(&o.unloadTimeout, "unload-timeout", def.UnloadTimeout,
		"how long an unloaded model's running requests may take to finish before they are cancelled")
	fs.StringVar(&o.modelsConfig, "models-config", "",
		"YAML models config: versions, aliases, deprecation, fallbacks, canary and shadow rollouts, routers (reloaded on SIGHUP)")
	fs.StringVar(&o.safetyURL, "safety-url", "",
		"safety classifier to ask about every request's input (POST JSON; answers allow, flag or block); none by default")
	fs.DurationVar(&o.safetyTimeout, "safety-timeout", safety.DefaultTimeout, "bound on each safety check")
	fs.StringVar(&o.safetyPolicy, "safety-policy", string(safety.FailOpen),
		"what a safety check that fails or times out decides: open (serve) or closed (refuse with 503)")
	fs.StringArrayVar(&o.upstreams, "upstream", nil,
		"MODEL=URL[,URL...][#NAME]: serve MODEL through OpenAI-compatible engines (vLLM, SGLang, llama-server, llmd) "+
			"with llmd's queue, quotas and streams in front (repeatable)")
	fs.StringArrayVar(&o.upTokenizers, "upstream-tokenizer", nil,
		"MODEL=PATH: count an upstream model's prompts with the tokenizer and chat template at PATH (a GGUF file, a Hugging Face "+
			"model directory or hub name in the local cache, ollama:NAME); by default the engine's /tokenize, else the model "+
			"path the engine reports, else an estimate (repeatable)")
	fs.IntVar(&o.upMaxWaiting, "upstream-max-waiting", 8,
		"release requests to an upstream engine while its own waiting queue (its /metrics) is at most this")
	fs.Float64Var(&o.upMaxKV, "upstream-max-kv", 0.95,
		"release requests to an upstream engine while its KV-cache use (its /metrics, 0 to 1) is under this")
	fs.IntVar(&o.safetyEvery, "safety-output-every", 0,
		"also check the answer every N tokens as it streams, and at its end (0: input only)")
	fs.BoolVar(&o.safetyAtEnd, "safety-output-at-end", false, "also check each answer once at its end")
	fs.StringVar(&o.dataDir, "data-dir", "", "data directory (default: $XDG_DATA_HOME/llmd or the platform's user data directory)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format on stderr: text or json")
	fs.DurationVar(&o.heartbeat, "heartbeat", def.HeartbeatInterval, "interval of SSE heartbeat comments on silent streams")
	fs.IntVar(&o.maxBatchTokens, "max-batch-tokens", def.Engine.MaxBatchTokens, "most tokens in one engine step (decode tokens plus prefill chunks)")
	fs.IntVar(&o.maxRunning, "max-running", def.Engine.MaxRunning, "most sequences running at once per model")
	fs.IntVar(&o.expectedOutput, "expected-output-tokens", def.Engine.ExpectedOutputTokens,
		"output length admission projects for a tenant without history (0: max_tokens); lower admits more and preempts more")
	fs.BoolVar(&o.prefixCache, "prefix-cache", !def.Engine.DisablePrefixCache, "reuse cached KV blocks of identical prompt prefixes")
	fs.StringSliceVar(&o.tierWeights, "tier-weights", nil,
		"weighted-fair-queuing weights of the tiers, e.g. enterprise=8,paid=4,free=2,batch=1 (the default)")
	fs.BoolVar(&o.insecure, "insecure", false, "allow a non-loopback --listen while no API key exists (anyone can use it)")
	fs.BoolVar(&o.anonymous, "anonymous", false,
		"serve requests without a key as the local tenant even after API keys were made (loopback --listen only)")
	fs.StringSliceVar(&o.allowedHosts, "allowed-host", nil,
		"host names (besides IP addresses and localhost) that keyless requests may use in their Host header")
	fs.StringSliceVar(&o.corsOrigins, "cors-origin", nil,
		"origins (https://app.example) whose web pages may call llmd; none by default")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS with this certificate (PEM); reloaded on SIGHUP")
	fs.StringVar(&o.tlsKey, "tls-key", "", "the private key (PEM) of --tls-cert")
	fs.StringVar(&o.caCert, "ca-cert", "", "CA certificate (PEM) that peers' TLS certificates are checked against (default: the system's)")
	fs.DurationVar(&o.bodyTimeout, "body-timeout", def.BodyTimeout, "bound on reading a whole request, headers and body")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", def.IdleTimeout, "close a kept-alive connection idle this long")
	fs.IntVar(&o.maxConns, "max-connections", def.MaxConnections, "most open connections (0: no bound); past it 503")
	fs.IntVar(&o.maxClientConns, "max-client-connections", def.MaxClientConnections,
		"most open connections from one IP address (0: no bound); past it 503")
	fs.DurationVar(&o.maxClientLag, "max-client-lag", def.MaxClientLagTime,
		"close a streaming client this far behind its stream (it can resume); 0: no bound in time")
	fs.StringVar(&o.redis, "redis", "", "keep quota buckets in Redis at this URL (redis://host:port/db), shared by every llmd using it")
	fs.DurationVar(&o.quotaTimeout, "quota-timeout", def.QuotaTimeout, "bound on each Redis quota call; past it a local bucket decides")
	fs.Int64Var(&o.hotTenantRPS, "hot-tenant-rps", def.HotTenantRPS,
		"with --redis: split a tenant sending more than this many requests in one second into --hot-tenant-shards Redis sub-buckets, agreed in Redis (0: off)")
	fs.IntVar(&o.hotShards, "hot-tenant-shards", def.HotTenantShards, "sub-buckets of a tenant detected hot by --hot-tenant-rps (2 to 64)")
	fs.BoolVar(&o.quotaShadow, "quota-shadow", false, "evaluate quotas and log refusals, but admit every request")
	fs.BoolVar(&o.quotaEstimate, "quota-estimate", false,
		"reserve each tenant's learned answer length (p90 of its last 64) instead of max_tokens; longer answers are charged at the end")
	fs.StringSliceVar(&o.degradeRoutes, "degrade-route", nil,
		"MODEL=SMALLER: under overload serve MODEL's free-tier requests with SMALLER (repeatable, or a comma-separated list)")
	fs.IntVar(&o.degradeMax, "degrade-max-tokens", def.DegradeFreeMaxTokens, "under overload cap free-tier max_tokens at this (0: no cap)")
	fs.DurationVar(&o.degradeWait, "degrade-queue-wait", def.Engine.Ladder.QueueWaitHigh,
		"queue wait that counts as overload and starts the degradation ladder")
	fs.BoolVar(&o.noDegrade, "no-degrade", false, "turn the degradation ladder off")
	fs.StringVar(&o.configFile, "config", "", "YAML file with prices per model (prices, gpu_hour_price, currency) for usage reports")
	fs.StringVar(&o.nodeID, "node-id", "", "this node's name in usage rows and logs (default: the host name)")
	fs.DurationVar(&o.stallTimeout, "stall-timeout", def.StallTimeout,
		"end a request with an error when it produces no new token for this long after its first")
	fs.DurationVar(&o.resumeGrace, "resume-grace", def.ResumeGrace,
		"how long a resumable stream keeps generating with no client attached before it is cancelled")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", def.ShutdownTimeout,
		"on SIGTERM, how long in-flight requests may take to finish before they are cancelled")
	fs.StringSliceVar(&o.join, "join", nil, "join a cluster through these members' gossip addresses (host:port, comma-separated)")
	fs.StringVar(&o.gossipAddr, "gossip-addr", "", "cluster gossip address (default 127.0.0.1:7946 when --join is given)")
	fs.StringVar(&o.gossipKey, "gossip-key", "", "cluster gossip key: 16, 24 or 32 bytes, base64 (required in a cluster unless --insecure-gossip)")
	fs.BoolVar(&o.insecureGossip, "insecure-gossip", false, "allow an unencrypted cluster (anyone who reaches the gossip port joins)")
	fs.StringVar(&o.gossipProfile, "gossip-profile", "", "memberlist timings: lan (default) or local (20 ms probes, for tests)")
	_ = fs.MarkHidden("gossip-profile")
	fs.StringVar(&o.advertiseAPI, "advertise-api", "", "the API address peers use to reach this node (default: the listen address)")
	fs.StringVar(&o.routePolicy, "route-policy", string(cluster.PolicyPrefix),
		"how a cluster node picks the node that serves a request: prefix (cached prefix, then conversation, within the load bound), affinity, round_robin, least_loaded or local (never forward)")
	fs.Float64Var(&o.loadBound, "load-bound", 1.25, "skip a node whose load is above this multiple of the cluster's mean (prefix routing)")
	fs.IntVar(&o.loadSlack, "load-slack", cluster.DefaultLoadSlack,
		"...but only when it is also this many sequences above the least loaded node (0 for none)")
	fs.StringSliceVar(&o.fallbacks, "fallback-model", nil,
		"FROM=TO: serve requests for model FROM with model TO when no alive cluster node serves FROM (repeatable, or a comma-separated list)")
	fs.DurationVar(&o.forwardTimeout, "forward-timeout", daemon.DefaultForwardTimeout,
		"how long a peer has to accept a forwarded request before it is tried on the next node")
	fs.IntVar(&o.retryJoinMax, "retry-join-max", 0,
		"give up (and exit) after this many failed attempts to join the --join members; 0 retries while llmd runs")
	fs.StringVar(&o.zone, "zone", "", "this node's zone or region label: requests prefer nodes of the zone they enter")
	fs.StringVar(&o.role, "role", "both",
		"this node's part in disaggregated prefill and decode: prefill (prefills prompts for decode nodes, which pull their KV blocks), decode or both")
	fs.IntVar(&o.disaggMinPrompt, "disagg-min-prompt", cluster.DefaultDisaggMinPrompt,
		"a decode node pulls a prompt's KV blocks from a prefill node when at least this many of its tokens are not cached here")
	fs.IntVar(&o.disaggBusy, "disagg-busy-running", 0,
		"...or, while it runs at least this many sequences (ITL pressure), a quarter as many; 0 off")
	fs.DurationVar(&o.disaggTimeout, "disagg-timeout", time.Minute,
		"how long a decode node waits for a prefill node's KV blocks before computing the prompt itself")
	fs.Float64Var(&o.autoscaleKV, "autoscale-kv-target", 0.8,
		"autoscaling signal (llmd_desired_replicas): the mean KV-cache use (0 to 1) a replica should run at")
	fs.Float64Var(&o.autoscaleWaiting, "autoscale-waiting-target", 4,
		"autoscaling signal: the mean queued requests per replica")
	fs.DurationVar(&o.autoscaleTTFT, "autoscale-ttft-target", 2*time.Second,
		"autoscaling signal: the TTFT p50 (last minute) a replica should keep")
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// config turns the options into a daemon.Config.
func (o options) config(getenv func(string) string) (daemon.Config, error) {
	cfg := daemon.DefaultConfig()
	if err := o.checkEnums(); err != nil {
		return cfg, err
	}
	cfg.Listen = o.listen
	cfg.GPU = o.gpu
	cfg.TP = o.tp
	cfg.Models = splitList(strings.Join(o.models, ","))
	cfg.ModelFiles = o.modelFiles
	cfg.ModelsDir = o.modelsDir
	cfg.CPUThreads = o.cpuThreads
	cfg.KVCacheBytes = int64(o.kvCacheMiB) << 20
	cfg.KVCacheType = o.kvType
	cfg.CPUF16MatMul = o.f16MatMul
	cfg.Speculative, cfg.DraftModel = o.speculative, o.draftModel
	if o.specTokens < 1 || o.specTokens > engine.MaxSpecTokens || o.specMaxBatch < 1 {
		return cfg, fmt.Errorf("--spec-tokens must be 1 to %d and --spec-max-batch at least 1", engine.MaxSpecTokens)
	}
	cfg.Engine.Spec.MaxTokens, cfg.Engine.Spec.MaxBatch = o.specTokens, o.specMaxBatch
	cfg.MemoryBudget = o.memoryBudgetMiB << 20
	cfg.UnloadTimeout = o.unloadTimeout
	cfg.ModelsConfig = o.modelsConfig
	for _, u := range o.upstreams {
		spec, err := daemon.ParseUpstream(u)
		if err != nil {
			return cfg, err
		}
		spec.MaxWaiting, spec.MaxKVUsage = o.upMaxWaiting, o.upMaxKV
		cfg.Upstreams = append(cfg.Upstreams, spec)
	}
	for _, t := range o.upTokenizers {
		model, path, ok := strings.Cut(t, "=")
		if !ok || model == "" || path == "" {
			return cfg, fmt.Errorf("--upstream-tokenizer %q: use MODEL=PATH (a GGUF file, a Hugging Face model directory or hub name, or ollama:NAME)", t)
		}
		i := slices.IndexFunc(cfg.Upstreams, func(u daemon.UpstreamSpec) bool { return u.Model == model })
		if i < 0 {
			return cfg, fmt.Errorf("--upstream-tokenizer %q: no --upstream serves %s", t, model)
		}
		cfg.Upstreams[i].Tokenizer = path
	}
	if o.safetyURL != "" {
		cfg.Safety = safety.Config{URL: o.safetyURL, Timeout: o.safetyTimeout, Policy: safety.Policy(o.safetyPolicy),
			OutputEvery: o.safetyEvery, OutputAtEnd: o.safetyAtEnd}
		if err := cfg.Safety.Validate(); err != nil {
			return cfg, fmt.Errorf("--safety-url, --safety-timeout, --safety-policy: %w", err)
		}
	}
	// GGUF models and a models config replace the default simulated ones
	// unless --models (or LLMD_MODELS) asks for simulated ones too.
	modelsSet := (o.fs != nil && o.fs.Changed("models")) || getenv("LLMD_MODELS") != ""
	if (len(o.modelFiles) > 0 || o.modelsDir != "" || o.modelsConfig != "" || len(o.upstreams) > 0) && !modelsSet {
		cfg.Models = nil
	}
	cfg.Resolve.OllamaModels = getenv("OLLAMA_MODELS")
	cfg.Resolve.Home = getenv("HOME")
	cfg.HeartbeatInterval = o.heartbeat
	cfg.Engine.MaxBatchTokens = o.maxBatchTokens
	cfg.Engine.MaxRunning = o.maxRunning
	cfg.Engine.ExpectedOutputTokens = o.expectedOutput
	cfg.Engine.DisablePrefixCache = !o.prefixCache
	if err := parseTierWeights(o.tierWeights, &cfg.Engine.TierWeights); err != nil {
		return cfg, err
	}
	cfg.Insecure = o.insecure
	cfg.Anonymous = o.anonymous
	cfg.AllowedHosts, cfg.CORSOrigins = o.allowedHosts, o.corsOrigins
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.CAFile = o.tlsCert, o.tlsKey, o.caCert
	cfg.BodyTimeout, cfg.IdleTimeout, cfg.MaxClientLagTime = o.bodyTimeout, o.idleTimeout, o.maxClientLag
	cfg.MaxConnections, cfg.MaxClientConnections = o.maxConns, o.maxClientConns
	cfg.RedisURL = o.redis
	cfg.QuotaTimeout = o.quotaTimeout
	cfg.HotTenantRPS, cfg.HotTenantShards = o.hotTenantRPS, o.hotShards
	cfg.QuotaShadow = o.quotaShadow
	cfg.QuotaEstimate = o.quotaEstimate
	cfg.DegradeFreeMaxTokens = o.degradeMax
	for _, r := range o.degradeRoutes {
		from, to, ok := strings.Cut(r, "=")
		if !ok || strings.TrimSpace(from) == "" || strings.TrimSpace(to) == "" {
			return cfg, fmt.Errorf("--degrade-route %q: use MODEL=SMALLER, e.g. sim/flagship=sim/small", r)
		}
		if cfg.DegradeRoutes == nil {
			cfg.DegradeRoutes = map[string]string{}
		}
		cfg.DegradeRoutes[strings.TrimSpace(from)] = strings.TrimSpace(to)
	}
	cfg.Engine.Ladder.Disabled = o.noDegrade
	if o.autoscaleKV <= 0 || o.autoscaleKV > 1 || o.autoscaleWaiting <= 0 || o.autoscaleTTFT <= 0 {
		return cfg, fmt.Errorf("--autoscale-kv-target (0 to 1], --autoscale-waiting-target and --autoscale-ttft-target must be positive")
	}
	cfg.Autoscale = daemon.AutoscaleTargets{KVUsage: o.autoscaleKV, Waiting: o.autoscaleWaiting, TTFT: o.autoscaleTTFT}
	cfg.NodeID = o.nodeID
	if len(o.join) > 0 || o.gossipAddr != "" {
		policy, _ := cluster.ParsePolicy(o.routePolicy) // checked by checkEnums
		cc := &daemon.ClusterConfig{GossipAddr: o.gossipAddr, Join: splitList(strings.Join(o.join, ",")),
			InsecureGossip: o.insecureGossip, APIAddr: o.advertiseAPI, RoutePolicy: policy, LoadBound: o.loadBound,
			LoadSlack: o.loadSlack, ForwardTimeout: o.forwardTimeout, RetryJoinMax: o.retryJoinMax, Zone: o.zone,
			DisaggTimeout: o.disaggTimeout, Disagg: cluster.DisaggPolicy{MinPromptTokens: o.disaggMinPrompt, BusyRunning: o.disaggBusy}}
		cc.Role, _ = cluster.ParseRole(o.role) // checked by checkEnums
		if o.disaggMinPrompt < 1 || o.disaggBusy < 0 || o.disaggTimeout <= 0 {
			return cfg, fmt.Errorf("--disagg-min-prompt must be positive, --disagg-busy-running not negative and --disagg-timeout positive")
		}
		if o.retryJoinMax < 0 {
			return cfg, fmt.Errorf("--retry-join-max %d: must be 0 (retry while llmd runs) or more", o.retryJoinMax)
		}
		cc.Profile = o.gossipProfile
		for _, fb := range o.fallbacks {
			from, to, ok := strings.Cut(fb, "=")
			from, to = strings.TrimSpace(from), strings.TrimSpace(to)
			if !ok || from == "" || to == "" || from == to {
				return cfg, fmt.Errorf("--fallback-model %q: use FROM=TO, e.g. sim/flagship=sim/mid", fb)
			}
			if cc.Fallback == nil {
				cc.Fallback = map[string]string{}
			}
			cc.Fallback[from] = to
		}
		if o.loadSlack < 0 {
			return cfg, fmt.Errorf("--load-slack %d: must be 0 or more", o.loadSlack)
		}
		if cc.LoadSlack == 0 {
			cc.LoadSlack = -1 // the flag's 0 is no slack; the config's 0 is the default
		}
		if o.loadBound < 1 || math.IsNaN(o.loadBound) || math.IsInf(o.loadBound, 0) {
			return cfg, fmt.Errorf("--load-bound %v: must be a number of at least 1", o.loadBound)
		}
		if o.gossipKey != "" {
			key, err := base64.StdEncoding.DecodeString(o.gossipKey)
			if err != nil || (len(key) != 16 && len(key) != 24 && len(key) != 32) {
				return cfg, errors.New("--gossip-key must be 16, 24 or 32 bytes in base64 (e.g. head -c 32 /dev/urandom | base64)")
			}
			cc.Key = key
		}
		if cc.Key == nil && !cc.InsecureGossip {
			return cfg, errors.New("a cluster needs --gossip-key (head -c 32 /dev/urandom | base64), or --insecure-gossip")
		}
		cfg.Cluster = cc
	}
	cfg.StallTimeout = o.stallTimeout
	cfg.ResumeGrace = o.resumeGrace
	cfg.ShutdownTimeout = o.drainTimeout
	if o.configFile != "" {
		if err := readConfigFile(o.configFile, &cfg); err != nil {
			return cfg, err
		}
	}
	if o.degradeWait != cfg.Engine.Ladder.QueueWaitHigh {
		cfg.Engine.Ladder.QueueWaitHigh = o.degradeWait
		cfg.Engine.Ladder.QueueWaitLow = o.degradeWait / 4
	}
	cfg.DataDir = o.dataDir
	if cfg.DataDir == "" {
		dir, err := defaultDataDir(getenv)
		if err != nil {
			return cfg, err
		}
		cfg.DataDir = dir
	}
	defDir, _ := defaultDataDir(getenv) // "" when there is none
	files, err := resolveModelFiles(o.modelFiles, cfg.DataDir, defDir)
	if err != nil {
		return cfg, err
	}
	cfg.ModelFiles = files
	return cfg, cfg.Validate()
}

// tierIndex is the engine's index of each tier.
var tierIndex = map[string]engine.Priority{"batch": engine.PriorityBatch, "free": engine.PriorityFree,
	"paid": engine.PriorityPaid, "enterprise": engine.PriorityEnterprise}

// parseTierWeights reads "tier=weight" pairs into w; tiers not named keep
// their defaults.
func parseTierWeights(pairs []string, w *[engine.NumPriorities]float64) error {
	for _, p := range pairs {
		name, val, ok := strings.Cut(p, "=")
		i, known := tierIndex[strings.TrimSpace(name)]
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if !ok || !known || err != nil || !(f > 0) {
			return fmt.Errorf("--tier-weights %q: use TIER=WEIGHT with a tier of enterprise, paid, free, batch "+
				"and a positive weight", p)
		}
		w[i] = f
	}
	return nil
}

// defaultDataDir is $XDG_DATA_HOME/llmd, else ~/.local/share/llmd on Unix,
// else the platform's user configuration directory (macOS, Windows).
func defaultDataDir(getenv func(string) string) (string, error) {
	if x := getenv("XDG_DATA_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "llmd"), nil
	}
	if runtime.GOOS != "darwin" && runtime.GOOS != "windows" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("find the data directory: %w; pass --data-dir", err)
		}
		return filepath.Join(home, ".local", "share", "llmd"), nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("find the data directory: %w; pass --data-dir", err)
	}
	return filepath.Join(dir, "llmd"), nil
}

// newLogger returns the slog logger for --log-level and --log-format.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("log format %q: use text or json", format)
	}
}

// serve runs the daemon until SIGINT or SIGTERM.
func serve(ctx context.Context, o options, getenv func(string) string, stdout, stderr io.Writer) error {
	logger, err := newLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		return &usageError{err}
	}
	cfg, err := o.config(getenv)
	if err != nil {
		return &usageError{err}
	}
	// GOMAXPROCS stays the Go default (one P per CPU): a P beyond the CPU
	// executor's threads let the runtime wake and spin threads that the
	// operating system then shares with the pool's, 5x the context
	// switches and 9-12% slower steps at 8 streams (BENCHMARKS.md, issue
	// 22 item 4).
	if cfg.RedisURL != "" {
		// go-redis reports failed dials through a process-wide logger;
		// send them to ours, at debug level: the quota service counts and
		// logs Redis failures itself.
		redis.SetLogger(redisLogger{logger.With("component", "redis")})
	}
	if isTerminal(stderr) {
		cfg.LoadProgress = progressBar(stderr)
	}
	// daemon.Open, in two steps: the banner reads the store.
	deps, err := daemon.OpenDeps(cfg, logger)
	if err != nil {
		return err
	}
	keysMade := false
	if deps.Store != nil {
		if keysMade, err = deps.Store.KeysEverMade(ctx); err != nil {
			logger.Warn("cannot tell whether API keys exist", "err", err)
		}
	}
	srv, err := daemon.New(cfg, deps, logger)
	if err != nil {
		if deps.Close != nil {
			deps.Close()
		}
		return err
	}
	addr, err := srv.Listen()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	scheme := "http"
	if cfg.TLSCertFile != "" {
		scheme = "https"
	}
	fmt.Fprintf(stdout, "llmd listening on %s://%s serving %s\n", scheme, addr, strings.Join(srv.Models(), ", "))
	if len(cfg.Models) > 0 {
		fmt.Fprintf(stdout, "  sim/ models: SIMULATED executor on %s x%s per model, no real weights, placeholder text\n",
			cfg.GPU, strconv.Itoa(cfg.TP))
	}
	if len(cfg.ModelFiles) > 0 || cfg.ModelsDir != "" {
		fmt.Fprintln(stdout, "  GGUF models: CPU executor (real weights)")
	}
	for _, u := range cfg.Upstreams {
		fmt.Fprintf(stdout, "  %s: upstream engines at %s (llmd queues, meters and relays in front)\n", u.Model, strings.Join(u.URLs, ", "))
	}
	if cfg.ModelsConfig != "" {
		fmt.Fprintf(stdout, "  models config: %s (reloaded on SIGHUP; `llmctl models` lists what it serves)\n", cfg.ModelsConfig)
	}
	fmt.Fprint(stdout, accessBanner(cfg, keysMade))
	// SIGHUP reloads the TLS certificate (open connections keep theirs)
	// and the models config.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	done := make(chan struct{})
	var reloads errgroup.Group
	reloads.Go(func() error {
		for {
			select {
			case <-done:
				return nil
			case <-hup:
				if cfg.TLSCertFile != "" {
					if err := srv.ReloadTLS(); err != nil {
						logger.Error("SIGHUP: TLS certificate not reloaded", "err", err)
					}
				}
				if err := srv.ReloadModels(ctx); err != nil {
					logger.Error("SIGHUP: models config not reloaded", "err", err)
				}
			}
		}
	})
	err = srv.Run(ctx)
	close(done)
	_ = reloads.Wait()
	return err
}

// accessBanner is the startup banner's lines about access: whether
// requests need an API key, and how to get one.
func accessBanner(cfg daemon.Config, keysMade bool) string {
	switch {
	case cfg.Anonymous:
		return "  access: requests without a key act as the local tenant (--anonymous); API keys work too\n"
	case !keysMade:
		return "  access: open: no API key exists yet, requests without one act as the local tenant (loopback only).\n" +
			"    \"llmctl keys create --admin\" makes the first key (llmctl saves it for itself); from then on every\n" +
			"    request needs a key\n"
	default:
		return "  access: API keys required (they exist in " + cfg.DataDir + "): llmctl uses the key \"llmctl login\" saved\n" +
			"    or $LLMD_API_KEY; an admin key makes more (llmctl keys create), and with no admin key at hand\n" +
			"    \"llmctl keys create --admin --data-dir " + cfg.DataDir + "\" makes one offline\n"
	}
}

// redisLogger adapts slog to go-redis's logger.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.DebugContext(ctx, fmt.Sprintf(format, v...))
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressBar draws model loading as one line that rewrites itself:
// "loading models [#####-----] 1/2 tiny".
func progressBar(w io.Writer) func(done, total int, name string) {
	const width = 20
	return func(done, total int, name string) {
		filled := width * done / max(total, 1)
		bar := strings.Repeat("#", filled) + strings.Repeat("-", width-filled)
		fmt.Fprintf(w, "\r\x1b[Kloading models [%s] %d/%d %s", bar, done, total, name)
		if done == total {
			fmt.Fprintln(w)
		}
	}
}
