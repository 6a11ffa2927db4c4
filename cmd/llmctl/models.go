package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmd/llmd/api"
)

// newModelsCmd builds "llmctl models": alone it lists the models llmd
// serves (GET /v1/models); its subcommands manage them while llmd runs.
func newModelsCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "models",
		Short: "List the models llmd serves; load, unload and roll out model versions",
		Long: "Without a subcommand, list the models llmd serves (any key).\n" +
			"The subcommands need an admin key: list shows each loaded model's state and memory,\n" +
			"load and unload change them while llmd runs, without a restart; apply replaces the\n" +
			"models config (versions, aliases, routers); shadow, canary and promote roll a new\n" +
			"version of an alias out (saved to llmd's --models-config file).",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			models, err := a.client.Models(cmd.Context())
			if err != nil {
				return a.apiError(err)
			}
			if asJSON {
				if models == nil {
					models = []api.Model{}
				}
				return writeJSON(cmd.OutOrStdout(), api.ModelList{Object: "list", Data: models})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 8, 3, ' ', 0)
			if _, err := tw.Write([]byte("ID\tKIND\tARCH\tPARAMS\tQUANT\tCONTEXT\tOWNED BY\n")); err != nil {
				return err
			}
			for _, m := range models {
				ctxLen := "-"
				if m.MaxModelLen > 0 {
					ctxLen = strconv.Itoa(m.MaxModelLen)
				}
				kind := m.Kind
				if kind == "" {
					kind = "chat"
				}
				row := []string{m.ID, kind, orDash(m.Architecture), formatParams(m.ParameterCount), orDash(m.Quantization), ctxLen, orDash(m.OwnedBy)}
				if _, err := tw.Write([]byte(strings.Join(row, "\t") + "\n")); err != nil {
					return err
				}
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON (the shape of GET /v1/models)")
	cmd.AddCommand(newModelsListCmd(a), newModelsLoadCmd(a), newModelsUnloadCmd(a), newModelsApplyCmd(a), newModelsCanaryCmd(a), newModelsShadowCmd(a), newModelsPromoteCmd(a))
	return cmd
}

// newModelsListCmd builds "llmctl models list".
func newModelsListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the loaded models with their state, memory and active requests (needs an admin key)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := a.client.LoadedModels(cmd.Context())
			if err != nil {
				return a.adminError(err)
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(w, l)
			}
			tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tEXECUTOR\tMEMORY\tACTIVE\tKEEP ALIVE\tSOURCE")
			for _, m := range l.Models {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", m.ID, m.State, orDash(m.Executor), formatBytes(m.Memory),
					m.Active, orDash(m.KeepAlive), orDash(m.Source))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			budget := "the host's available memory"
			if l.MemoryBudget > 0 {
				budget = formatBytes(l.MemoryBudget)
			}
			_, err = fmt.Fprintf(w, "memory accounted: %s (budget: %s)\n", formatBytes(l.MemoryUsed), budget)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}

// newModelsLoadCmd builds "llmctl models load".
func newModelsLoadCmd(a *app) *cobra.Command {
	var (
		req       api.ModelLoadRequest
		kvMiB     int64
		keepAlive time.Duration
	)
	cmd := &cobra.Command{
		Use:   "load SOURCE",
		Short: "Load a model while llmd runs (needs an admin key): a GGUF path on the llmd host, ollama:NAME[:TAG] or sim:PROFILE",
		Example: `  llmctl models load /models/qwen2.5-0.5b-instruct-q8_0.gguf --id qwen-2026-10-01
  llmctl models load ollama:qwen2.5:0.5b --keep-alive 10m
  llmctl models load sim:flagship --id sim/flagship-2026-11-15`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Source = args[0]
			req.KVCacheBytes = kvMiB << 20
			if keepAlive > 0 {
				req.KeepAlive = keepAlive.String()
			}
			bar := newLoadBar(cmd.ErrOrStderr(), isTerminalWriter(cmd.ErrOrStderr()))
			st, err := a.client.LoadModel(cmd.Context(), req, bar.update)
			bar.done()
			if err != nil {
				return a.apiError(err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "loaded %s (%s, %s accounted)\n", st.ID, st.Executor, formatBytes(st.Memory))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.ID, "id", "", "id to serve the model under (default: the file or Ollama name; sim/ ids for simulated models)")
	f.Int64Var(&kvMiB, "kv-cache-mib", 0, "KV cache of a GGUF model in MiB (0: llmd's --kv-cache-mib)")
	f.IntVar(&req.Threads, "threads", 0, "CPU threads of a GGUF model (0: llmd's --cpu-threads)")
	f.StringVar(&req.KVCacheType, "kv-cache-type", "", "KV cache type of a GGUF model: f16, f32, q8_0 or q4_0 (default: llmd's --kv-cache-type)")
	f.StringVar(&req.GPU, "gpu", "", "simulated GPU of a sim: model (default: llmd's --gpu)")
	f.IntVar(&req.TP, "tp", 0, "tensor-parallel degree of a sim: model (0: llmd's --tp)")
	f.DurationVar(&keepAlive, "keep-alive", 0, "unload the model once idle this long (0: keep it loaded)")
	return cmd
}

// newModelsUnloadCmd builds "llmctl models unload".
func newModelsUnloadCmd(a *app) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "unload ID",
		Short: "Drain and unload a model (needs an admin key): no new requests, running ones finish, then its memory is freed",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := a.client.UnloadModel(cmd.Context(), args[0], timeout)
			if err != nil {
				return a.apiError(err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "unloaded %s after %s: %d requests finished, %d cancelled, %s freed\n",
				res.ID, (time.Duration(res.DrainMs) * time.Millisecond).String(), res.Finished, res.Cancelled, formatBytes(res.FreedBytes))
			return err
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "how long running requests may take to finish before they are cancelled (0: llmd's --unload-timeout)")
	return cmd
}

// loadBar draws a load's progress: a bar with bytes and ETA on a
// terminal, one line per phase otherwise.
type loadBar struct {
	w        io.Writer
	tty      bool
	start    time.Time
	phase    string
	drawn    bool
	lastLine time.Time
}

func newLoadBar(w io.Writer, tty bool) *loadBar { return &loadBar{w: w, tty: tty, start: time.Now()} }

func (b *loadBar) update(p api.ModelLoadProgress) {
	switch p.Status {
	case api.LoadReading:
		if b.phase != p.Status {
			b.phase, b.start = p.Status, time.Now()
			if !b.tty {
				fmt.Fprintf(b.w, "reading %s (%s)\n", p.Model, formatBytes(p.Total))
			}
		}
		if !b.tty || p.Total <= 0 {
			return
		}
		frac := float64(p.Completed) / float64(p.Total)
		const width = 30
		n := int(frac * width)
		eta := "-"
		if el := time.Since(b.start); frac > 0.01 && frac < 1 {
			eta = (time.Duration(float64(el)/frac) - el).Round(time.Second).String()
		}
		fmt.Fprintf(b.w, "\rreading %s [%s%s] %3.0f%% %s / %s ETA %s ", p.Model, strings.Repeat("#", n),
			strings.Repeat(".", width-n), frac*100, formatBytes(p.Completed), formatBytes(p.Total), eta)
		b.drawn = true
	case api.LoadBuilding, api.LoadChecking:
		if b.phase == p.Status {
			return
		}
		b.phase = p.Status
		if b.drawn {
			fmt.Fprintln(b.w)
			b.drawn = false
		}
		if p.Status == api.LoadBuilding {
			fmt.Fprintf(b.w, "building %s\n", orDash(p.Model))
		}
	}
}

// done ends the bar's line.
func (b *loadBar) done() {
	if b.drawn {
		fmt.Fprintln(b.w)
		b.drawn = false
	}
}

// formatBytes writes a byte count in binary units.
func formatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatParams writes a parameter count the way model cards do: 70.6B,
// 494M, 4.2M.
func formatParams(n int64) string {
	switch {
	case n <= 0:
		return "-"
	case n >= 1e9:
		return fmt.Sprintf("%.1fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return strconv.FormatInt(n, 10)
}
