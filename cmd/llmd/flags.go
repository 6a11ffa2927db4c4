package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/llmd/llmd/cluster"
	"github.com/llmd/llmd/safety"
)

// lineListFlags are the list flags whose values may hold commas: in the
// environment they take one value per line, not a comma-separated list.
var lineListFlags = map[string]bool{"model": true, "upstream": true, "upstream-tokenizer": true}

// envName is the environment variable that sets flag name when the flag
// is not given: LLMD_ and the name in capitals, "-" as "_".
func envName(name string) string {
	return "LLMD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// annotateEnv appends each visible flag's environment variable to its help
// line, so that llmd --help lists every variable that works.
func annotateEnv(fs *pflag.FlagSet) {
	fs.VisitAll(func(fl *pflag.Flag) {
		if fl.Hidden || fl.Name == "help" {
			return
		}
		fl.Usage += " [$" + envName(fl.Name) + "]"
	})
}

// applyEnv sets every flag not given on the command line from its
// environment variable, if that is set. A list flag's variable replaces
// the default list: comma-separated, or one value per line for the flags
// in lineListFlags.
func applyEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	var errs []error
	fs.VisitAll(func(fl *pflag.Flag) {
		if fl.Changed || fl.Name == "help" {
			return
		}
		name := envName(fl.Name)
		v := getenv(name)
		if v == "" {
			return
		}
		if sv, ok := fl.Value.(pflag.SliceValue); ok {
			list := splitList(v)
			if lineListFlags[fl.Name] {
				list = splitLines(v)
			}
			if err := sv.Replace(list); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			}
			return
		}
		if err := fl.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
		}
	})
	return errors.Join(errs...)
}

func splitLines(v string) []string {
	var out []string
	for _, s := range strings.Split(v, "\n") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// checkEnums refuses a value outside a flag's list of names, whether or
// not the feature it configures is on, with the valid names.
func (o options) checkEnums() error {
	if _, err := cluster.ParsePolicy(o.routePolicy); err != nil {
		return fmt.Errorf("--route-policy %q: use one of %s", o.routePolicy, cluster.PolicyNames(cluster.Policies))
	}
	if p := safety.Policy(o.safetyPolicy); p != safety.FailOpen && p != safety.FailClosed {
		return fmt.Errorf("--safety-policy %q: use %s or %s", o.safetyPolicy, safety.FailOpen, safety.FailClosed)
	}
	if _, err := cluster.ParseRole(o.role); err != nil {
		return fmt.Errorf("--role %q: use prefill, decode or both", o.role)
	}
	if o.gossipProfile != "" && o.gossipProfile != "lan" && o.gossipProfile != "local" {
		return fmt.Errorf("--gossip-profile %q: use lan or local", o.gossipProfile)
	}
	return nil
}

// resolveModelFiles returns the --model values to load, each once: a value
// given twice (or as two spellings of one file) is loaded once. A bare
// name that is no file here names a model in the models/ directory of one
// of dataDirs (llmd's, then the default one, where "llmctl model init"
// writes): --model tiny loads models/tiny.gguf.
func resolveModelFiles(specs []string, dataDirs ...string) ([]string, error) {
	var (
		out  []string
		seen = map[string]bool{}
	)
	for _, spec := range specs {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			return nil, errors.New("--model is empty: give a GGUF file, a directory or ollama:NAME")
		}
		if !strings.HasPrefix(spec, "ollama:") {
			spec = inModelsDir(spec, dataDirs)
		}
		key := spec
		if !strings.HasPrefix(spec, "ollama:") {
			if abs, err := filepath.Abs(spec); err == nil {
				key = abs
			}
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, spec)
	}
	return out, nil
}

// inModelsDir returns DIR/models/NAME[.gguf] for a bare NAME that is no
// file in the working directory but is one in the first of dataDirs that
// has it; else spec.
func inModelsDir(spec string, dataDirs []string) string {
	if strings.ContainsRune(spec, filepath.Separator) || exists(spec) {
		return spec
	}
	for _, dir := range dataDirs {
		if dir == "" {
			continue
		}
		for _, name := range []string{spec, spec + ".gguf"} {
			if p := filepath.Join(dir, "models", name); exists(p) {
				return p
			}
		}
	}
	return spec
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
