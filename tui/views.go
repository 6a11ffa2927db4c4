package tui

import (
	"fmt"
	"strings"

	"github.com/llmd/llmd/api"
)

// view is one of the tables of llmctl top.
type view int

const (
	viewRequests view = iota
	viewTenants
	viewModels
	viewNodes
	numViews
)

var viewNames = [numViews]string{"requests", "tenants", "models", "nodes"}

// tiers are the priority tiers, in the order the header shows them.
var tiers = []string{api.TierBatch, api.TierFree, api.TierPaid, api.TierEnterprise}

// Columns of the requests view.
const (
	reqID = iota
	reqTenant
	reqModel
	reqTier
	reqState
	reqPrompt
	reqCached
	reqGen
	reqTTFT
	reqRate
	reqAge
)

func requestColumns() []Column {
	return []Column{
		reqID:     {Title: "ID", Width: 12, Flex: true, Max: 36},
		reqTenant: {Title: "TENANT", Width: 8},
		reqModel:  {Title: "MODEL", Width: 9},
		reqTier:   {Title: "TIER", Width: 10, Drop: 1},
		reqState:  {Title: "STATE", Width: 7},
		reqPrompt: {Title: "PROMPT", Width: 6, Right: true, Numeric: true},
		reqCached: {Title: "CACHED", Width: 6, Right: true, Numeric: true},
		reqGen:    {Title: "GEN", Width: 5, Right: true, Numeric: true},
		reqTTFT:   {Title: "TTFT", Width: 5, Right: true, Numeric: true},
		reqRate:   {Title: "TOK/S", Width: 5, Right: true, Numeric: true},
		reqAge:    {Title: "AGE", Width: 5, Right: true, Numeric: true},
	}
}

func stateLevel(state string) Level {
	switch state {
	case api.StateQueued:
		return LevelDim
	case api.StateSwapped:
		return LevelWarn
	case api.StatePrefill:
		return LevelOK
	}
	return LevelNone
}

func requestRows(s *api.Snapshot) []Row {
	rows := make([]Row, 0, len(s.Requests))
	for _, r := range s.Requests {
		rows = append(rows, Row{ID: r.ID, Cells: []Cell{
			reqID:     {Text: r.ID},
			reqTenant: {Text: r.Tenant},
			reqModel:  {Text: r.Model},
			reqTier:   {Text: r.Tier},
			reqState:  {Text: r.State, Level: stateLevel(r.State)},
			reqPrompt: num(float64(r.PromptTokens), fmtCount),
			reqCached: num(float64(r.CachedTokens), fmtCount),
			reqGen:    num(float64(r.GeneratedTokens), fmtCount),
			reqTTFT:   num(r.TTFT, fmtLatency),
			reqRate:   num(r.TokensPerSecond, fmtRate),
			reqAge:    num(r.Age, fmtAge),
		}})
	}
	return rows
}

func num(v float64, format func(float64) string) Cell {
	return Cell{Text: format(v), Num: v}
}

// Columns of the tenants view.
const (
	tenName = iota
	tenTier
	tenRunning
	tenRPM
	tenTPM
	tenConc
	tenDaily
	tenRejected
	tenReserved
)

// burnWidth is the width of a burn bar in the tenants view.
const burnWidth = 5

func tenantColumns() []Column {
	bar := func(title string) Column {
		return Column{Title: title, Width: burnWidth + 5, Numeric: true}
	}
	return []Column{
		tenName:     {Title: "TENANT", Width: 10, Flex: true, Max: 24},
		tenTier:     {Title: "TIER", Width: 10},
		tenRunning:  {Title: "RUN", Width: 3, Right: true, Numeric: true},
		tenRPM:      bar("RPM"),
		tenTPM:      bar("TPM"),
		tenConc:     bar("CONC"),
		tenDaily:    bar("DAILY"),
		tenRejected: {Title: "REJ/1M", Width: 6, Right: true, Numeric: true},
		tenReserved: {Title: "RESERVED TOK/S", Width: 14, Right: true, Numeric: true},
	}
}

// reservedCell is a tenant's delivered output rate against its reserved
// one ("412/400"), warned under 95% while it runs requests; "-" without a
// reservation. It sorts by the fraction delivered.
func reservedCell(t api.TenantSnapshot) Cell {
	r := t.Reserved
	if r == nil || r.ReservedTPS <= 0 {
		return Cell{Text: "-", Num: -1, Level: LevelDim}
	}
	f := r.DeliveredTPS / r.ReservedTPS
	c := Cell{Text: fmtCount(r.DeliveredTPS) + "/" + fmtCount(r.ReservedTPS), Num: f}
	if f < 0.95 && t.Running > 0 {
		c.Level = LevelWarn
	}
	return c
}

// Burns of a tenant's quota: the fraction of each limit in use. A limit
// of 0 is unlimited: the burn is -1.
func burns(t api.TenantSnapshot) (rpm, tpm, conc, daily float64) {
	l, u := t.Limits, t.Usage
	burn := func(used, limit int64) float64 {
		if limit <= 0 {
			return -1
		}
		return frac(float64(used), float64(limit))
	}
	return burn(l.RequestsPerMinute-u.RequestsAvailable, l.RequestsPerMinute),
		burn(l.TokensPerMinute-u.TokensAvailable, l.TokensPerMinute),
		burn(u.InFlight, l.Concurrency),
		burn(u.DailyTokensUsed, l.DailyTokens)
}

func burnCell(f float64) Cell {
	if f < 0 {
		return Cell{Text: "unlimited", Num: -1, Level: LevelDim}
	}
	return Cell{Text: burnBar(f, burnWidth) + " " + fmtPct(f), Num: f, Level: fillLevel(f)}
}

func tenantRows(s *api.Snapshot) []Row {
	rows := make([]Row, 0, len(s.Tenants))
	for _, t := range s.Tenants {
		rpm, tpm, conc, daily := burns(t)
		rej := num(float64(t.Rejected1), fmtCount)
		if t.Rejected1 > 0 {
			rej.Level = LevelWarn
		}
		rows = append(rows, Row{ID: t.Tenant, Cells: []Cell{
			tenName:     {Text: t.Tenant},
			tenTier:     {Text: t.Tier},
			tenRunning:  num(float64(t.Running), fmtCount),
			tenRPM:      burnCell(rpm),
			tenTPM:      burnCell(tpm),
			tenConc:     burnCell(conc),
			tenDaily:    burnCell(daily),
			tenRejected: rej,
			tenReserved: reservedCell(t),
		}})
	}
	return rows
}

// Columns of the models view.
const (
	modName = iota
	modExec
	modKV
	modUsed
	modCached
	modFree
	modRunning
	modWaiting
	modSwapped
	modRate
	modDone
	modGenerated
	modPrefix
	modPreempt
	modPreemptKinds
	modEvict
	modTTFT50
	modTTFT95
	modITL50
	modITL95
	modSteps
	modComputed
	modDegrade
)

func modelColumns() []Column {
	n := func(title string, width, drop int) Column {
		return Column{Title: title, Width: width, Right: true, Numeric: true, Drop: drop}
	}
	return []Column{
		modName:         {Title: "MODEL", Width: 10, Flex: true, Max: 24},
		modExec:         {Title: "EXECUTOR", Width: 9, Drop: 9},
		modKV:           n("KV", 4, 0),
		modUsed:         n("USED", 5, 4),
		modCached:       n("CACHED", 6, 6),
		modFree:         n("FREE", 5, 5),
		modRunning:      n("RUN", 4, 0),
		modWaiting:      n("WAIT", 4, 0),
		modSwapped:      n("SWAP", 4, 1),
		modRate:         n("TOK/S", 6, 0),
		modDone:         n("DONE", 6, 3),
		modGenerated:    n("GEN TOK", 7, 10),
		modPrefix:       n("PREFIX", 6, 0),
		modPreempt:      n("PREEMPT", 7, 0),
		modPreemptKinds: {Title: "SWAP/RECOMP", Width: 11, Right: true, Drop: 13},
		modEvict:        n("EVICT", 5, 11),
		modTTFT50:       n("TTFT50", 6, 8),
		modTTFT95:       n("TTFT95", 6, 0),
		modITL50:        n("ITL50", 6, 7),
		modITL95:        n("ITL95", 6, 0),
		modSteps:        n("STEPS", 7, 12),
		modComputed:     n("COMPUTED", 8, 14),
		modDegrade:      {Title: "DEGRADE", Width: 10},
	}
}

// kvFill is a model's KV cache use: used blocks over all blocks.
func kvFill(m api.ModelSnapshot) float64 {
	return frac(float64(m.BlocksUsed), float64(m.BlocksTotal))
}

// prefixHit is a model's prefix-cache hit rate; NaN before any query.
func prefixHit(m api.ModelSnapshot) (float64, bool) {
	if m.PrefixQueryTokens == 0 {
		return 0, false
	}
	return float64(m.PrefixHitTokens) / float64(m.PrefixQueryTokens), true
}

// degraded tells whether a model's degradation ladder is above "none".
func degraded(m api.ModelSnapshot) bool {
	return m.DegradeLevel > 0 || (m.Degrade != "" && m.Degrade != "none")
}

func degradeText(m api.ModelSnapshot) string {
	if m.Degrade == "" {
		return "none"
	}
	return m.Degrade
}

func modelRows(s *api.Snapshot, rates *rateTracker) []Row {
	rows := make([]Row, 0, len(s.Models))
	for _, m := range s.Models {
		kv := kvFill(m)
		hit := Cell{Text: "-", Num: -1}
		if h, ok := prefixHit(m); ok {
			hit = Cell{Text: fmt.Sprintf("%.1f%%", h*100), Num: h}
		}
		deg := Cell{Text: degradeText(m), Num: float64(m.DegradeLevel)}
		if degraded(m) {
			deg.Level = LevelHot
		}
		free := m.BlocksTotal - m.BlocksUsed - m.BlocksCached
		rows = append(rows, Row{ID: m.Model, Cells: []Cell{
			modName:         {Text: m.Model},
			modExec:         {Text: m.Executor},
			modKV:           {Text: fmtPct(kv), Num: kv, Level: fillLevel(kv)},
			modUsed:         num(float64(m.BlocksUsed), fmtCount),
			modCached:       num(float64(m.BlocksCached), fmtCount),
			modFree:         num(float64(max(free, 0)), fmtCount),
			modRunning:      num(float64(m.Running), fmtCount),
			modWaiting:      num(float64(m.Waiting), fmtCount),
			modSwapped:      num(float64(m.Swapped), fmtCount),
			modRate:         num(rates.current(m.Model), fmtRate),
			modDone:         num(float64(m.Completed), fmtCount),
			modGenerated:    num(float64(m.GeneratedTokens), fmtCount),
			modPrefix:       hit,
			modPreempt:      num(float64(m.Preemptions), fmtCount),
			modPreemptKinds: {Text: fmt.Sprintf("%d/%d", m.PreemptionsSwap, m.PreemptionsRecompute)},
			modEvict:        num(float64(m.Evictions), fmtCount),
			modTTFT50:       num(m.TTFTP50, fmtLatency),
			modTTFT95:       num(m.TTFTP95, fmtLatency),
			modITL50:        num(m.ITLP50, fmtLatency),
			modITL95:        num(m.ITLP95, fmtLatency),
			modSteps:        num(float64(m.Steps), fmtCount),
			modComputed:     num(float64(m.ComputedTokens), fmtCount),
			modDegrade:      deg,
		}})
	}
	return rows
}

// Columns of the nodes view.
const (
	nodeName = iota
	nodeUptime
	nodeModels
	nodeRunning
	nodeWaiting
	nodeRequests
	nodeKV
	nodeGPUs
	nodeCluster
)

func nodeColumns() []Column {
	n := func(title string, width int) Column {
		return Column{Title: title, Width: width, Right: true, Numeric: true}
	}
	return []Column{
		nodeName:     {Title: "NODE", Width: 10, Flex: true, Max: 24},
		nodeUptime:   n("UPTIME", 6),
		nodeModels:   n("MODELS", 6),
		nodeRunning:  n("RUNNING", 7),
		nodeWaiting:  n("WAITING", 7),
		nodeRequests: n("REQUESTS", 8),
		nodeKV:       n("KV", 4),
		nodeGPUs:     n("GPUS", 4),
		nodeCluster:  {Title: "CLUSTER", Width: 13},
	}
}

// notClustered is what the nodes view says when llmd runs alone.
const notClustered = "not clustered"

func nodeRows(s *api.Snapshot) []Row {
	var running, waiting, used, total int
	for _, m := range s.Models {
		running += m.Running
		waiting += m.Waiting
		used += m.BlocksUsed
		total += m.BlocksTotal
	}
	kv := frac(float64(used), float64(total))
	name := s.Node
	if name == "" {
		name = "(this node)"
	}
	return []Row{{ID: name, Cells: []Cell{
		nodeName:     {Text: name},
		nodeUptime:   num(s.Uptime, fmtAge),
		nodeModels:   num(float64(len(s.Models)), fmtCount),
		nodeRunning:  num(float64(running), fmtCount),
		nodeWaiting:  num(float64(waiting), fmtCount),
		nodeRequests: num(float64(len(s.Requests)), fmtCount),
		nodeKV:       {Text: fmtPct(kv), Num: kv, Level: fillLevel(kv)},
		nodeGPUs:     num(float64(len(s.GPUs)), fmtCount),
		nodeCluster:  {Text: notClustered, Level: LevelDim},
	}}}
}

// Columns of the nodes view when llmd is clustered: one row per member.
const (
	memName = iota
	memStatus
	memRunning
	memWaiting
	memKV
	memModels
	memPrefix
	memUpdated
	memAPI
)

func memberColumns() []Column {
	n := func(title string, width int) Column {
		return Column{Title: title, Width: width, Right: true, Numeric: true}
	}
	return []Column{
		memName: {Title: "NODE", Width: 10, Flex: true, Max: 24},
		// STATUS sorts by severity (statusRank), worst first.
		memStatus:  {Title: "STATUS", Width: 8, Numeric: true},
		memRunning: n("RUNNING", 7),
		memWaiting: n("WAITING", 7),
		memKV:      n("KV MAX", 6),
		memModels:  n("MODELS", 6),
		memPrefix:  n("PREFIXES", 8),
		memUpdated: n("UPDATED", 7),
		memAPI:     {Title: "API", Width: 21, Drop: 1},
	}
}

// localMark follows the answering node's id in the nodes view.
const localMark = " (this)"

// memberStatus is a member's status as the nodes view shows it: its
// membership status, or "draining" for a live node finishing its work;
// rank orders them by severity (alive 0, draining 1, left 2, suspect 3,
// dead 4).
func memberStatus(n api.NodeInfo) (text string, rank float64, l Level) {
	switch {
	case n.Status == "alive" && n.Draining:
		return "draining", 1, LevelWarn
	case n.Status == "alive":
		return n.Status, 0, LevelOK
	case n.Status == "left":
		return n.Status, 2, LevelWarn
	case n.Status == "suspect":
		return n.Status, 3, LevelWarn
	case n.Status == "dead":
		return n.Status, 4, LevelCrit
	}
	return n.Status, 5, LevelWarn // a status this llmctl does not know
}

// memberLoad sums a member's running and waiting sequences over its
// models and takes its fullest model's KV cache use.
func memberLoad(n api.NodeInfo) (running, waiting int, kvMax float64) {
	for _, l := range n.Load {
		running += l.Running
		waiting += l.Waiting
		kvMax = max(kvMax, l.KVUsage)
	}
	return running, waiting, kvMax
}

// memberAge is the time since a member's last state update, in seconds on
// the answering node's clock; -1 when none arrived yet.
func memberAge(s *api.Snapshot, n api.NodeInfo) float64 {
	if n.Updated.IsZero() || s.Time.IsZero() {
		return -1
	}
	return max(s.Time.Sub(n.Updated).Seconds(), 0)
}

// clusterCounts counts the members and the alive ones (draining included).
func clusterCounts(s *api.Snapshot) (members, alive int) {
	for _, n := range s.Cluster {
		if n.Status == "alive" {
			alive++
		}
	}
	return len(s.Cluster), alive
}

// clusterSummary is "3 members, 2 alive".
func clusterSummary(members, alive int) string {
	noun := "members"
	if members == 1 {
		noun = "member"
	}
	return fmt.Sprintf("%d %s, %d alive", members, noun, alive)
}

func memberRows(s *api.Snapshot) []Row {
	rows := make([]Row, 0, len(s.Cluster))
	for _, n := range s.Cluster {
		name := n.ID
		if n.Local {
			name += localMark
		}
		status, rank, level := memberStatus(n)
		running, waiting, kv := memberLoad(n)
		updated := Cell{Text: "-", Num: -1, Level: LevelDim}
		if age := memberAge(s, n); age >= 0 {
			updated = num(age, fmtAge)
		}
		kvCell := Cell{Text: fmtPct(kv), Num: kv, Level: fillLevel(kv)}
		if len(n.Load) == 0 {
			kvCell = Cell{Text: "-", Num: -1, Level: LevelDim}
		}
		rows = append(rows, Row{ID: n.ID, Cells: []Cell{
			memName:    {Text: name},
			memStatus:  {Text: status, Num: rank, Level: level},
			memRunning: num(float64(running), fmtCount),
			memWaiting: num(float64(waiting), fmtCount),
			memKV:      kvCell,
			memModels:  num(float64(len(n.Models)), fmtCount),
			memPrefix:  num(float64(n.PrefixKeys), fmtCount),
			memUpdated: updated,
			memAPI:     {Text: n.APIAddr},
		}})
	}
	return rows
}

// tierLoad counts one model's sequences per tier.
type tierLoad struct {
	running, waiting map[string]int
}

// tierLoads returns each model's running sequences per tier (counted from
// the snapshot's requests in prefill or decode) and waiting ones (the
// engine's own count per tier).
func tierLoads(s *api.Snapshot) map[string]tierLoad {
	out := make(map[string]tierLoad, len(s.Models))
	for _, m := range s.Models {
		w := make(map[string]int, len(m.WaitingByTier))
		for k, v := range m.WaitingByTier {
			w[strings.ToLower(k)] = v
		}
		out[m.Model] = tierLoad{running: map[string]int{}, waiting: w}
	}
	for _, r := range s.Requests {
		if r.State != api.StatePrefill && r.State != api.StateDecode {
			continue
		}
		tl, ok := out[r.Model]
		if !ok {
			continue
		}
		tl.running[strings.ToLower(r.Tier)]++
	}
	return out
}
