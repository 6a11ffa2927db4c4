package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmd/llmd/api"
)

// rolloutOrder is the example shared by the rollout commands: the order in
// which a new version replaces the one behind an alias.
const rolloutOrder = `  # Roll sim/flagship-2026-11-15 out behind the alias flagship.
  # 1. Shadow: copy 10% of the requests to it, answer from the stable version, compare.
  llmctl models shadow set flagship sim/flagship-2026-11-15 --percent 10
  llmctl models shadow report --alias flagship --since 24h
  llmctl models shadow clear flagship
  # 2. Canary: serve it to a share of each tier, the lowest tiers first.
  llmctl models canary set flagship sim/flagship-2026-11-15 --percent free=5,paid=0,enterprise=0
  llmctl models canary --alias flagship
  llmctl models canary set flagship sim/flagship-2026-11-15 --percent free=50,paid=10,enterprise=1
  # 3. Promote it; the old version stays served under its pinned name, deprecated.
  llmctl models promote flagship --deprecate-old 2026-12-01 --sunset-old 2027-03-01`

// canaryTierOrder is the order tiers are shown in a canary's shares: the
// order a canary usually reaches them.
var canaryTierOrder = []string{api.TierFree, api.TierPaid, api.TierEnterprise, api.TierBatch}

// newModelsApplyCmd builds "llmctl models apply".
func newModelsApplyCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "apply FILE",
		Short: "Replace llmd's models config (versions, aliases, rollouts, routers) with a YAML file (needs an admin key)",
		Long: "Send a models config (YAML) to llmd, which loads the models it adds, unloads those it\n" +
			"drops and saves it to its --models-config file. FILE \"-\" reads the config from stdin.",
		Example: "  llmctl models apply models.yaml\n  generate-models | llmctl models apply -",
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			yaml, err := readModelsConfig(cmd.InOrStdin(), args[0])
			if err != nil {
				return &exitError{code: exitFailure, err: err}
			}
			res, err := a.client.ApplyModelsConfig(cmd.Context(), yaml)
			if err != nil {
				return a.adminError(err)
			}
			return writeModelsApplied(cmd.OutOrStdout(), res)
		},
	}
}

// readModelsConfig reads the config of "llmctl models apply": the file at
// path, or in when path is "-".
func readModelsConfig(in io.Reader, path string) ([]byte, error) {
	var (
		b   []byte
		err error
	)
	if path == "-" {
		path = "stdin"
		b, err = io.ReadAll(in)
	} else {
		b, err = os.ReadFile(path)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("models config %s does not exist", path)
	case err != nil:
		return nil, fmt.Errorf("read models config: %w", err)
	case len(strings.TrimSpace(string(b))) == 0:
		return nil, fmt.Errorf("models config %s is empty", path)
	}
	return b, nil
}

// writeModelsApplied writes what applying a models config changed.
func writeModelsApplied(w io.Writer, res *api.ModelsApplied) error {
	list := func(names []string) string {
		if len(names) == 0 {
			return "none"
		}
		return strings.Join(names, ", ")
	}
	saved := "saved to llmd's --models-config file"
	if !res.Saved {
		saved = "not saved to a --models-config file: it lasts until llmd restarts"
	}
	_, err := fmt.Fprintf(w, "loaded: %s\nunloaded: %s\nnames: %s\n%s\n", list(res.Loaded), list(res.Unloaded), list(res.Names), saved)
	return err
}

// canaryStatusOptions are the flags of "llmctl models canary [status]".
type canaryStatusOptions struct {
	alias  string
	asJSON bool
}

func (o *canaryStatusOptions) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.alias, "alias", "", "only this alias's rollout")
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "print the rollouts as JSON")
}

// newModelsCanaryCmd builds "llmctl models canary": alone, the same as
// "canary status".
func newModelsCanaryCmd(a *app) *cobra.Command {
	o := &canaryStatusOptions{}
	cmd := &cobra.Command{
		Use:   "canary",
		Short: "Show each alias's canary and how it compares with the stable version; set and clear canaries (needs an admin key)",
		Long: "Without a subcommand, the same as \"canary status\". A canary serves a share of each\n" +
			"tier's requests to an alias from a new version; llmd rolls it back by itself when it does worse.",
		Example: rolloutOrder,
		Args:    usageArgs(unknownCommand),
		RunE:    func(cmd *cobra.Command, args []string) error { return a.canaryStatus(cmd, o) },
	}
	o.flags(cmd)
	cmd.AddCommand(newCanaryStatusCmd(a), newCanarySetCmd(a), newCanaryClearCmd(a))
	return cmd
}

// newCanaryStatusCmd builds "llmctl models canary status".
func newCanaryStatusCmd(a *app) *cobra.Command {
	o := &canaryStatusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each alias's stable version, canary, shares per tier, shadow, and both versions' figures (needs an admin key)",
		Long: "For each alias: its stable version, its canary (or none) and the canary's state (running, or\n" +
			"rolled_back with the reason and time), the canary's share of each tier, the shadow version if any,\n" +
			"and a table comparing the two versions' recent requests: ERRORS, LENGTH (stopped by max tokens)\n" +
			"and CANCELLED are percentages of REQUESTS; TTFT and ITL are percentiles in milliseconds.",
		Example: "  llmctl models canary status\n  llmctl models canary status --alias flagship --json\n\n" + rolloutOrder,
		Args:    usageArgs(cobra.NoArgs),
		RunE:    func(cmd *cobra.Command, args []string) error { return a.canaryStatus(cmd, o) },
	}
	o.flags(cmd)
	return cmd
}

// canaryStatus runs "llmctl models canary status".
func (a *app) canaryStatus(cmd *cobra.Command, o *canaryStatusOptions) error {
	if cmd.Flags().Changed("alias") && o.alias == "" {
		return usageError(cmd, errors.New("--alias is empty"))
	}
	l, err := a.client.Rollouts(cmd.Context())
	if err != nil {
		return a.adminError(err)
	}
	if o.alias != "" {
		i := slices.IndexFunc(l.Aliases, func(c api.CanaryStatus) bool { return c.Alias == o.alias })
		if i < 0 {
			var names []string
			for _, c := range l.Aliases {
				names = append(names, c.Alias)
			}
			known := "llmd has no alias"
			if len(names) > 0 {
				known = "the aliases are " + strings.Join(names, ", ")
			}
			return &exitError{code: exitFailure, err: fmt.Errorf("no alias %q: %s", o.alias, known)}
		}
		l = &api.RolloutList{Aliases: l.Aliases[i : i+1]}
	}
	w := cmd.OutOrStdout()
	if o.asJSON {
		if l.Aliases == nil {
			l.Aliases = []api.CanaryStatus{}
		}
		return writeJSON(w, l)
	}
	if len(l.Aliases) == 0 {
		_, err := fmt.Fprintln(w, "no aliases: define them in llmd's models config (llmctl models apply FILE)")
		return err
	}
	for i, c := range l.Aliases {
		if i > 0 {
			if _, err := fmt.Fprintln(w); err != nil {
				return err
			}
		}
		if err := writeCanaryStatus(w, c); err != nil {
			return err
		}
	}
	return nil
}

// writeCanaryStatus writes one alias's block of "llmctl models canary".
func writeCanaryStatus(w io.Writer, c api.CanaryStatus) error {
	state := orDash(c.State)
	if c.State == "rolled_back" {
		state = "rolled back"
		if c.RolledBackAt != nil {
			state += " at " + formatTime(*c.RolledBackAt)
		}
		if c.Reason != "" {
			state += ": " + c.Reason
		}
	}
	shadow := "none"
	if c.Shadow != "" {
		shadow = fmt.Sprintf("%s (%s%% of requests copied)", c.Shadow, formatPercent(c.ShadowPercent))
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "alias:\t%s\n", c.Alias)
	fmt.Fprintf(tw, "stable:\t%s\n", orDash(c.Stable))
	fmt.Fprintf(tw, "canary:\t%s\n", orNone(c.Canary))
	fmt.Fprintf(tw, "state:\t%s\n", state)
	if len(c.Percent) > 0 {
		fmt.Fprintf(tw, "percent:\t%s\n", formatTierPercents(c.Percent))
	}
	fmt.Fprintf(tw, "shadow:\t%s\n", shadow)
	if err := tw.Flush(); err != nil {
		return err
	}

	// A row per version; model names the version when its figures do not.
	type versionRow struct {
		name, model string
		s           api.VersionStats
	}
	rows := []versionRow{{"stable", c.Stable, c.StableStats}}
	if c.Canary != "" || c.CanaryStats.Model != "" {
		rows = append(rows, versionRow{"canary", c.Canary, c.CanaryStats})
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  \tMODEL\tREQUESTS\tERRORS\tTTFT p50\tTTFT p95\tITL p50\tITL p95\tLENGTH\tCANCELLED")
	for _, r := range rows {
		s, n := r.s, int64(r.s.Requests)
		model := cmp.Or(s.Model, r.model)
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.name, orDash(model), groupDigits(n),
			formatRate(s.ErrorRate, n), formatLatency(s.TTFTP50Ms, n), formatLatency(s.TTFTP95Ms, n),
			formatLatency(s.ITLP50Ms, n), formatLatency(s.ITLP95Ms, n), formatRate(s.LengthRate, n), formatRate(s.CancelRate, n))
	}
	return tw.Flush()
}

// canaryStatusLine says in one line where an alias's rollout stands, after
// a change: "flagship: stable A, canary B (running) at free 5%, paid 1%;
// shadow C at 10%".
func canaryStatusLine(c *api.CanaryStatus) string {
	s := fmt.Sprintf("%s: stable %s", c.Alias, orDash(c.Stable))
	if c.Canary == "" {
		s += ", no canary"
	} else {
		s += ", canary " + c.Canary
		if c.State != "" {
			s += " (" + strings.ReplaceAll(c.State, "_", " ") + ")"
		}
		if len(c.Percent) > 0 {
			s += " at " + formatTierPercents(c.Percent)
		}
	}
	if c.State == "rolled_back" && c.Reason != "" {
		s += ": " + c.Reason
	}
	if c.Shadow == "" {
		return s + "; no shadow"
	}
	return s + fmt.Sprintf("; shadow %s at %s%%", c.Shadow, formatPercent(c.ShadowPercent))
}

// newCanarySetCmd builds "llmctl models canary set".
func newCanarySetCmd(a *app) *cobra.Command {
	var percent string
	cmd := &cobra.Command{
		Use:   "set ALIAS VERSION --percent TIER=P,...",
		Short: "Serve a share of each tier's requests to ALIAS from VERSION (needs an admin key)",
		Long: "Start or change ALIAS's canary: --percent gives VERSION's share of each tier's requests,\n" +
			"as TIER=PERCENT pairs (tiers enterprise, paid, free, batch; a tier not named gets 0) or one\n" +
			"number for every tier. Shares are 0 to 100.",
		Example: "  llmctl models canary set flagship sim/flagship-2026-11-15 --percent free=5,paid=1,enterprise=0\n" +
			"  llmctl models canary set flagship sim/flagship-2026-11-15 --percent 5\n\n" + rolloutOrder,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("percent") {
				return usageError(cmd, errors.New("give the canary's share with --percent, e.g. --percent free=5,paid=1 or --percent 5"))
			}
			shares, err := parseTierPercents(percent)
			if err != nil {
				return usageError(cmd, err)
			}
			st, err := a.client.SetCanary(cmd.Context(), args[0], api.CanaryRequest{Version: args[1], Percent: shares})
			if err != nil {
				return a.adminError(err)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), canaryStatusLine(st))
			return err
		},
	}
	cmd.Flags().StringVar(&percent, "percent", "", "share of each tier's requests, TIER=PERCENT,... (free=5,paid=1,enterprise=0), or one number for every tier")
	return cmd
}

// newCanaryClearCmd builds "llmctl models canary clear".
func newCanaryClearCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "clear ALIAS",
		Short:   "End ALIAS's canary: every request goes to the stable version again (needs an admin key)",
		Example: "  llmctl models canary clear flagship\n\n" + rolloutOrder,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := a.client.ClearCanary(cmd.Context(), args[0])
			if err != nil {
				return a.adminError(err)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), canaryStatusLine(st))
			return err
		},
	}
}

// newModelsShadowCmd builds "llmctl models shadow".
func newModelsShadowCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shadow",
		Short: "Copy a share of an alias's requests to another version and compare the answers (needs an admin key)",
		Long: "A shadow version gets a copy of a share of an alias's requests; callers are answered by the\n" +
			"alias's version as usual, and llmd records how the shadow's answers and latencies compare.",
		Example: rolloutOrder,
		Args:    usageArgs(unknownCommand),
		RunE:    func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newShadowSetCmd(a), newShadowClearCmd(a), newShadowReportCmd(a))
	return cmd
}

// newShadowSetCmd builds "llmctl models shadow set".
func newShadowSetCmd(a *app) *cobra.Command {
	var percent float64
	cmd := &cobra.Command{
		Use:     "set ALIAS VERSION --percent P",
		Short:   "Copy P% of ALIAS's requests to VERSION (needs an admin key)",
		Example: "  llmctl models shadow set flagship sim/flagship-2026-11-15 --percent 10\n\n" + rolloutOrder,
		Args:    usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("percent") {
				return usageError(cmd, errors.New("give the share of requests to copy with --percent, e.g. --percent 10"))
			}
			if err := checkPercent("--percent", percent); err != nil {
				return usageError(cmd, err)
			}
			st, err := a.client.SetShadow(cmd.Context(), args[0], api.ShadowRequest{Version: args[1], Percent: percent})
			if err != nil {
				return a.adminError(err)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), canaryStatusLine(st))
			return err
		},
	}
	cmd.Flags().Float64Var(&percent, "percent", 0, "share of the alias's requests to copy, 0 to 100")
	return cmd
}

// newShadowClearCmd builds "llmctl models shadow clear".
func newShadowClearCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "clear ALIAS",
		Short:   "Stop copying ALIAS's requests to its shadow version (needs an admin key)",
		Example: "  llmctl models shadow clear flagship\n\n" + rolloutOrder,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := a.client.ClearShadow(cmd.Context(), args[0])
			if err != nil {
				return a.adminError(err)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), canaryStatusLine(st))
			return err
		},
	}
}

// shadowReportOptions are the flags of "llmctl models shadow report".
type shadowReportOptions struct {
	query        api.ShadowReportQuery
	since, until string
	asJSON       bool
}

// newShadowReportCmd builds "llmctl models shadow report".
func newShadowReportCmd(a *app) *cobra.Command {
	o := &shadowReportOptions{}
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Compare shadow versions with the versions they shadowed: errors, exact matches, latency, length, score (needs an admin key)",
		Long: `Report the shadow traffic of a window of time, one row per alias, primary
(the version that answered) and shadow version, in two tables.

Quality: RUNS counts the requests copied to the shadow, SHADOW ERRORS and
SKIPPED those whose shadow failed or was not run. EXACT MATCH counts, among
the runs both versions decoded greedily and that were compared, those
whose answers were equal token for token; MEAN EDIT DIST is their mean
token-level edit distance. SCORE is the scorer's mean rating, "-" when
none was scored.

Latency and length: each cell is "primary / shadow": time to first token
percentiles and mean inter-token latency in milliseconds, and the mean
number of output tokens; "-" for a side none of whose requests finished.

--since and --until are durations back from now ("24h", "90m", "7d" for
days) or RFC 3339 times; the window defaults to llmd's (the last 24 hours).`,
		Example: "  llmctl models shadow report --since 7d\n" +
			"  llmctl models shadow report --alias flagship --shadow-model sim/flagship-2026-11-15 --json\n\n" + rolloutOrder,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(time.Now()); err != nil {
				return usageError(cmd, err)
			}
			r, err := a.client.ShadowReport(cmd.Context(), o.query)
			if err != nil {
				return a.adminError(err)
			}
			if o.asJSON {
				if r.Rows == nil {
					r.Rows = []api.ShadowSummary{}
				}
				return writeJSON(cmd.OutOrStdout(), r)
			}
			return writeShadowReport(cmd.OutOrStdout(), r)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.query.Alias, "alias", "", "only this alias's shadow traffic")
	f.StringVar(&o.query.ShadowModel, "shadow-model", "", "only this shadow version's traffic")
	f.StringVar(&o.since, "since", "", `start of the window: a duration back from now ("24h", "7d") or an RFC 3339 time (default llmd's, 24h)`)
	f.StringVar(&o.until, "until", "", "end of the window: a duration back from now or an RFC 3339 time (default now)")
	f.BoolVar(&o.asJSON, "json", false, "print the report as JSON")
	return cmd
}

// check parses --since and --until into the query, relative to now.
func (o *shadowReportOptions) check(now time.Time) error {
	var err error
	if o.since != "" {
		if o.query.Since, err = parseWindowTime("--since", o.since, now); err != nil {
			return err
		}
	}
	if o.until != "" {
		if o.query.Until, err = parseWindowTime("--until", o.until, now); err != nil {
			return err
		}
	}
	if !o.query.Since.IsZero() && !o.query.Until.IsZero() && !o.query.Until.After(o.query.Since) {
		return fmt.Errorf("--until (%s) must be after --since (%s)", formatTime(o.query.Until), formatTime(o.query.Since))
	}
	return nil
}

// writeShadowReport writes r as the two tables of "llmctl models shadow
// report".
func writeShadowReport(w io.Writer, r *api.ShadowReport) error {
	alias, shadow := "all aliases", "all shadow versions"
	if r.Alias != "" {
		alias = "alias " + r.Alias
	}
	if r.ShadowModel != "" {
		shadow = "shadow " + r.ShadowModel
	}
	if _, err := fmt.Fprintf(w, "shadow traffic from %s to %s (UTC), %s, %s\n",
		formatTime(r.Since), formatTime(r.Until), alias, shadow); err != nil {
		return err
	}
	if len(r.Rows) == 0 {
		_, err := fmt.Fprintln(w, "no shadow traffic in the window")
		return err
	}

	if _, err := fmt.Fprintln(w, "\nquality"); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ALIAS\tPRIMARY\tSHADOW\tRUNS\tSHADOW ERRORS\tSKIPPED\tEXACT MATCH\tMEAN EDIT DIST\tSCORE")
	for _, s := range r.Rows {
		match, dist := "-", "-"
		if s.Compared > 0 {
			match = fmt.Sprintf("%s/%s (%s)", groupDigits(s.ExactMatches), groupDigits(s.Compared),
				formatRate(float64(s.ExactMatches)/float64(s.Compared), s.Compared))
			dist = strconv.FormatFloat(s.MeanEditDistance, 'f', 2, 64)
		}
		score := "-"
		if s.Scored > 0 {
			score = strconv.FormatFloat(s.MeanScore, 'f', 2, 64)
		}
		errs := groupDigits(s.ShadowErrors)
		if s.Runs > 0 {
			errs += " (" + formatRate(float64(s.ShadowErrors)/float64(s.Runs), s.Runs) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Alias, s.PrimaryModel, s.ShadowModel,
			groupDigits(s.Runs), errs, groupDigits(s.ShadowSkipped), match, dist, score)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if _, err := fmt.Fprintln(w, "\nlatency (ms) and length, primary / shadow"); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ALIAS\tPRIMARY\tSHADOW\tTTFT p50\tTTFT p95\tITL mean\tTOKENS mean")
	for _, s := range r.Rows {
		// A side's figures are 0 when none of its requests finished.
		side := func(v float64) string {
			if v == 0 {
				return "-"
			}
			return strconv.FormatFloat(v, 'f', 1, 64)
		}
		pair := func(p, sh float64) string { return side(p) + " / " + side(sh) }
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Alias, s.PrimaryModel, s.ShadowModel,
			pair(s.PrimaryTTFTP50Ms, s.ShadowTTFTP50Ms), pair(s.PrimaryTTFTP95Ms, s.ShadowTTFTP95Ms),
			pair(s.PrimaryITLMeanMs, s.ShadowITLMeanMs), pair(s.PrimaryTokensMean, s.ShadowTokensMean))
	}
	return tw.Flush()
}

// newModelsPromoteCmd builds "llmctl models promote".
func newModelsPromoteCmd(a *app) *cobra.Command {
	var req api.PromoteRequest
	cmd := &cobra.Command{
		Use:   "promote ALIAS",
		Short: "Make ALIAS's canary its stable version; the old one stays served under its pinned name (needs an admin key)",
		Long: "Promote ALIAS's canary: every request to ALIAS goes to it from now on. The previous stable\n" +
			"version stays served under its pinned name; --deprecate-old marks it deprecated from a date\n" +
			"and --sunset-old retires it at a date (YYYY-MM-DD or an RFC 3339 time).",
		Example: "  llmctl models promote flagship --deprecate-old 2026-12-01 --sunset-old 2027-03-01\n\n" + rolloutOrder,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkPromoteDates(req); err != nil {
				return usageError(cmd, err)
			}
			res, err := a.client.Promote(cmd.Context(), args[0], req)
			if err != nil {
				return a.adminError(err)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), promoteLine(res))
			return err
		},
	}
	cmd.Flags().StringVar(&req.Deprecate, "deprecate-old", "", "mark the previous stable version deprecated from this date (YYYY-MM-DD or RFC 3339)")
	cmd.Flags().StringVar(&req.Sunset, "sunset-old", "", "retire the previous stable version at this date (YYYY-MM-DD or RFC 3339)")
	return cmd
}

// checkPromoteDates checks the dates of a promotion: each one a date or an
// RFC 3339 time, the sunset not before the deprecation.
func checkPromoteDates(req api.PromoteRequest) error {
	var dep, sun time.Time
	var err error
	if req.Deprecate != "" {
		if dep, err = parseRolloutDate("--deprecate-old", req.Deprecate); err != nil {
			return err
		}
	}
	if req.Sunset != "" {
		if sun, err = parseRolloutDate("--sunset-old", req.Sunset); err != nil {
			return err
		}
	}
	if !dep.IsZero() && !sun.IsZero() && sun.Before(dep) {
		return fmt.Errorf("--sunset-old %s is before --deprecate-old %s", req.Sunset, req.Deprecate)
	}
	return nil
}

// promoteLine says what a promotion changed: "flagship: B is now stable
// (was A, deprecated from 2026-12-01, sunset 2027-03-01)".
func promoteLine(res *api.PromoteResult) string {
	was := "was " + orDash(res.Previous)
	if res.Deprecated != nil {
		was += ", deprecated from " + formatDate(*res.Deprecated)
	}
	if res.Sunset != nil {
		was += ", sunset " + formatDate(*res.Sunset)
	}
	return fmt.Sprintf("%s: %s is now stable (%s)", res.Alias, res.Stable, was)
}

// parseRolloutDate parses a date flag: YYYY-MM-DD (midnight UTC) or an RFC
// 3339 time.
func parseRolloutDate(flag, v string) (time.Time, error) {
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%s %q: give a date (2026-12-01) or an RFC 3339 time (2026-12-01T00:00:00Z)", flag, v)
}

// parseWindowTime parses a window flag relative to now: a positive
// duration back from now ("24h", "90m", "7d" for days) or an RFC 3339 time.
func parseWindowTime(flag, v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if n, ok := strings.CutSuffix(v, "d"); ok {
		if days, err := strconv.Atoi(n); err == nil && days > 0 {
			return now.Add(-time.Duration(days) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%s %q: give a duration back from now (24h, 7d) or an RFC 3339 time", flag, v)
}

// parseTierPercents parses --percent of "canary set": TIER=PERCENT pairs
// separated by commas, or one number for every tier.
func parseTierPercents(v string) (map[string]float64, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, errors.New("--percent is empty: give TIER=PERCENT,... or one number")
	}
	if !strings.Contains(v, "=") {
		p, err := parsePercent(v)
		if err != nil {
			return nil, err
		}
		out := map[string]float64{}
		for _, t := range canaryTierOrder {
			out[t] = p
		}
		return out, nil
	}
	out := map[string]float64{}
	for part := range strings.SplitSeq(v, ",") {
		tier, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		tier = strings.TrimSpace(tier)
		if !ok || tier == "" {
			return nil, fmt.Errorf("--percent %q: give TIER=PERCENT pairs separated by commas, e.g. free=5,paid=1", v)
		}
		if !slices.Contains(tiers, tier) {
			return nil, fmt.Errorf("--percent: unknown tier %q: use one of %s", tier, strings.Join(tiers, ", "))
		}
		if _, dup := out[tier]; dup {
			return nil, fmt.Errorf("--percent: tier %s given twice", tier)
		}
		p, err := parsePercent(val)
		if err != nil {
			return nil, fmt.Errorf("%w (tier %s)", err, tier)
		}
		out[tier] = p
	}
	return out, nil
}

// parsePercent parses one share: a number from 0 to 100, with an optional
// "%".
func parsePercent(v string) (float64, error) {
	s := strings.TrimSuffix(strings.TrimSpace(v), "%")
	p, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("--percent %q is not a number", v)
	}
	return p, checkPercent("--percent", p)
}

// checkPercent accepts a share from 0 to 100.
func checkPercent(flag string, p float64) error {
	if math.IsNaN(p) || p < 0 || p > 100 {
		return fmt.Errorf("%s %s: give a share from 0 to 100", flag, strconv.FormatFloat(p, 'g', -1, 64))
	}
	return nil
}

// formatTierPercents writes a canary's shares: "free 5%, paid 1%,
// enterprise 0%", tiers in canaryTierOrder, then any other in name order.
func formatTierPercents(m map[string]float64) string {
	var parts []string
	for _, t := range canaryTierOrder {
		if p, ok := m[t]; ok {
			parts = append(parts, t+" "+formatPercent(p)+"%")
		}
	}
	var others []string
	for t := range m {
		if !slices.Contains(canaryTierOrder, t) {
			others = append(others, t)
		}
	}
	slices.Sort(others)
	for _, t := range others {
		parts = append(parts, t+" "+formatPercent(m[t])+"%")
	}
	return strings.Join(parts, ", ")
}

// formatPercent writes a share in percent as briefly as it is: 5, 0.5.
func formatPercent(p float64) string {
	return strconv.FormatFloat(p, 'f', -1, 64)
}

// formatRate writes a fraction of n requests as a percentage to two
// decimals, "-" when there were none.
func formatRate(frac float64, n int64) string {
	if n <= 0 {
		return "-"
	}
	return strconv.FormatFloat(frac*100, 'f', 2, 64) + "%"
}

// formatDate writes a time as its date when it is midnight UTC, else as
// formatTime does.
func formatDate(t time.Time) string {
	u := t.UTC()
	if u.Equal(u.Truncate(24 * time.Hour)) {
		return u.Format(time.DateOnly)
	}
	return formatTime(t)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
