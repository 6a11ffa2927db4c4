// Package catalog is llmd's model registry: it parses the models config
// (--models-config), a YAML file naming the served model versions, aliases,
// deprecation, fallbacks, per-tier overrides, canary and shadow rollouts and
// rule-based routers, and answers, per request, which model serves it
// ([Catalog.Resolve]).
//
// A [Catalog] also keeps the live state behind those answers: canaries
// rolled back by [Catalog.CheckRollback], models in fallback cooldown after
// repeated failures ([Catalog.ReportFailure]), and per-model windows of
// request outcomes ([Catalog.Observe]) that compare a canary with its stable
// version. Loading the models is not its job.
//
// Everything is deterministic given its inputs: the caller passes the time
// (Query.Now, now) and the package never reads the clock. The canary and
// shadow draws hash the alias and the conversation (or the request id), so a
// conversation keeps its version.
//
// The package imports nothing from llmd.
package catalog
