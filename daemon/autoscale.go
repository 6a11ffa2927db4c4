package daemon

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmd/llmd/cluster"
)

// The autoscaling signal: for each model, how many replicas the cluster
// should run, from the load every node gossips (queue depth and KV-cache
// use) and this node's recent time to first token, against targets. It is
// a gauge for Kubernetes' HPA (through prometheus-adapter) or KEDA: the
// scaler reads llmd_desired_replicas and keeps its own stabilisation
// window, as it does for CPU.
//
// desired = ceil(replicas x max(kv/KVTarget, waiting/WaitingTarget,
// ttft/TTFTTarget) x (1 + WarmBuffer)), at least MinReplicas: the usual
// HPA rule over the tightest signal, with a warm buffer ahead of demand
// (a new replica takes minutes to load its model).

// AutoscaleTargets are the targets of the signal.
type AutoscaleTargets struct {
	// KVUsage is the mean KV-cache use (0 to 1) a replica should run at;
	// default 0.8.
	KVUsage float64
	// Waiting is the mean number of queued requests per replica; default 4.
	Waiting float64
	// TTFT is the p50 time to first token over the last minute; default
	// 2 s.
	TTFT time.Duration
	// WarmBuffer is the share of extra capacity kept ahead of demand;
	// default 0.1.
	WarmBuffer float64
	// MinReplicas is the least the signal asks for; default 1.
	MinReplicas int
}

func (t AutoscaleTargets) withDefaults() AutoscaleTargets {
	if t.KVUsage <= 0 {
		t.KVUsage = 0.8
	}
	if t.Waiting <= 0 {
		t.Waiting = 4
	}
	if t.TTFT <= 0 {
		t.TTFT = 2 * time.Second
	}
	if t.WarmBuffer < 0 {
		t.WarmBuffer = 0
	} else if t.WarmBuffer == 0 {
		t.WarmBuffer = 0.1
	}
	if t.MinReplicas <= 0 {
		t.MinReplicas = 1
	}
	return t
}

// Recommendation is the signal for one model.
type Recommendation struct {
	Model    string
	Replicas int // alive replicas serving it now
	Desired  int
	// The ratios to their targets; the largest decides.
	KV, Queue, TTFT float64
}

// recommend computes the signal for every model the members serve; ttft
// gives this node's recent p50 time to first token of a model it serves
// (0 when it does not, or has no sample).
func recommend(members []cluster.Member, ttft func(model string) time.Duration, t AutoscaleTargets) []Recommendation {
	t = t.withDefaults()
	type acc struct {
		n              int
		kv, waiting    float64
		ttft           time.Duration
		seenLocalModel bool
	}
	byModel := map[string]*acc{}
	var order []string
	for _, m := range members {
		if m.Status != cluster.StatusAlive || m.State.Draining {
			continue
		}
		for _, id := range m.Models {
			a := byModel[id]
			if a == nil {
				a = &acc{}
				byModel[id] = a
				order = append(order, id)
			}
			l := m.State.Load[id]
			a.n++
			a.kv += l.KVUsage
			a.waiting += float64(max(l.Waiting, 0))
			if m.Local {
				a.ttft = ttft(id)
			}
		}
	}
	out := make([]Recommendation, 0, len(order))
	for _, id := range order {
		a := byModel[id]
		r := Recommendation{Model: id, Replicas: a.n}
		r.KV = a.kv / float64(a.n) / t.KVUsage
		r.Queue = a.waiting / float64(a.n) / t.Waiting
		r.TTFT = a.ttft.Seconds() / t.TTFT.Seconds()
		ratio := max(r.KV, r.Queue, r.TTFT)
		r.Desired = max(t.MinReplicas, int(math.Ceil(float64(a.n)*ratio*(1+t.WarmBuffer)-1e-9)))
		out = append(out, r)
	}
	return out
}

// autoscaleCollector exports the signal at scrape time.
type autoscaleCollector struct {
	d        *Daemon
	targets  AutoscaleTargets
	desired  *prometheus.Desc
	ratio    *prometheus.Desc
	replicas *prometheus.Desc
}

func newAutoscaleCollector(d *Daemon, t AutoscaleTargets) *autoscaleCollector {
	return &autoscaleCollector{d: d, targets: t,
		desired: prometheus.NewDesc("llmd_desired_replicas",
			"Replicas of the model the cluster should run: ceil(replicas x the largest of KV use, queue depth and TTFT over their targets x (1 + warm buffer)).",
			[]string{"model_name"}, nil),
		ratio: prometheus.NewDesc("llmd_autoscale_signal_ratio",
			"Each autoscaling signal of the model over its target (kv, queue, ttft); above 1 asks for more replicas.",
			[]string{"model_name", "signal"}, nil),
		replicas: prometheus.NewDesc("llmd_autoscale_replicas",
			"Replicas of the model alive and not draining now: the base of llmd_desired_replicas.",
			[]string{"model_name"}, nil)}
}

func (c *autoscaleCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desired
	ch <- c.ratio
	ch <- c.replicas
}

func (c *autoscaleCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.d.Autoscale(c.targets) {
		ch <- prometheus.MustNewConstMetric(c.desired, prometheus.GaugeValue, float64(r.Desired), r.Model)
		ch <- prometheus.MustNewConstMetric(c.replicas, prometheus.GaugeValue, float64(r.Replicas), r.Model)
		ch <- prometheus.MustNewConstMetric(c.ratio, prometheus.GaugeValue, r.KV, r.Model, "kv")
		ch <- prometheus.MustNewConstMetric(c.ratio, prometheus.GaugeValue, r.Queue, r.Model, "queue")
		ch <- prometheus.MustNewConstMetric(c.ratio, prometheus.GaugeValue, r.TTFT, r.Model, "ttft")
	}
}

// Autoscale returns the autoscaling signal of every model the cluster (or
// this node alone) serves.
func (d *Daemon) Autoscale(t AutoscaleTargets) []Recommendation {
	members, _ := d.members()
	return recommend(members, func(model string) time.Duration {
		m := d.models.Get(model)
		if m == nil {
			return 0
		}
		p50, _, _, _ := m.Latency.Percentiles(time.Now(), time.Minute)
		return time.Duration(p50 * float64(time.Second))
	}, t)
}
