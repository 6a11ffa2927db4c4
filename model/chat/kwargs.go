package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/ardanlabs/jinja"
)

// KwargsError is returned by [CheckKwargs] and Render for template
// variables a request may not set. It is the client's error, so Render
// does not fall back.
type KwargsError struct {
	// Name is the offending variable; "" when the value is not a JSON
	// object.
	Name   string
	Reason string
}

func (e *KwargsError) Error() string {
	if e.Name == "" {
		return "model: chat_template_kwargs " + e.Reason
	}
	return fmt.Sprintf("model: chat_template_kwargs: %q %s", capName(e.Name), e.Reason)
}

func capName(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// tmplReservedVars are the variables Render sets itself, and the library's
// globals: a request's kwargs may not replace them.
var tmplReservedVars = map[string]bool{
	"messages": true, "tools": true, "add_generation_prompt": true, "bos_token": true, "eos_token": true,
	"documents": true, "raise_exception": true, "strftime_now": true, "range": true, "namespace": true,
	"dict": true, "joiner": true, "cycler": true, "loop": true, "caller": true, "varargs": true, "kwargs": true,
	"true": true, "false": true, "none": true, "True": true, "False": true, "None": true,
}

// tmplVarName is what a template variable's name may look like.
var tmplVarName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// CheckKwargs checks extra template variables (a request's
// chat_template_kwargs): raw must be empty, null or a JSON object whose
// keys are identifiers (at most 64 bytes) other than the variables Render
// sets (messages, tools, add_generation_prompt, bos_token, eos_token), the
// template globals (raise_exception, strftime_now, range, namespace, ...)
// and llmd's internal names. It returns a *KwargsError.
func CheckKwargs(raw json.RawMessage) error {
	_, err := tmplKwargsValue(raw)
	return err
}

// tmplKwargsValue decodes and checks kwargs; it returns None when there
// are none.
func tmplKwargsValue(raw json.RawMessage) (jinja.Value, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return jinja.None(), nil
	}
	if t[0] != '{' {
		return jinja.Undefined(), &KwargsError{Reason: "must be a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	dec.UseNumber()
	v, err := tmplDecodeJSON(dec, 1)
	if err != nil {
		return jinja.Undefined(), &KwargsError{Reason: "is not valid: " + err.Error()}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return jinja.Undefined(), &KwargsError{Reason: "has trailing data after the JSON object"}
	}
	for _, k := range v.AsDict().Keys {
		switch {
		case !tmplVarName.MatchString(k):
			return jinja.Undefined(), &KwargsError{Name: k, Reason: "is not a template variable name (letters, digits and _, at most 64)"}
		case tmplReservedVars[k], strings.HasPrefix(k, tmplHook):
			return jinja.Undefined(), &KwargsError{Name: k, Reason: "is set by llmd and cannot be passed"}
		}
	}
	return v, nil
}
