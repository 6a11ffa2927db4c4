package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/llmd/llmd/catalog"
)

// ModelChoice is how the models config resolved the name a request used:
// an alias, a router or a pinned version (see catalog.Decision).
type ModelChoice = catalog.Decision

// Loader loads a model the models config names but that is not resident
// (its keep_alive): the daemon's fleet. It returns once the model serves.
type Loader func(ctx context.Context, id string) (*Model, error)

// resolve asks the models config which model serves req. ok is false when
// the config does not know the name (a plain model id or a peer's). The
// request's "model" is then the version chosen, for this node and its
// peers alike.
func (p *Pipeline) resolve(ctx context.Context, req *Request, t Tenant) (d ModelChoice, ok bool, err error) {
	kind := p.catalog.Kind(req.Model)
	if kind == "" {
		return d, false, nil
	}
	q := catalog.Query{Model: req.Model, Tier: string(t.Tier), Conversation: req.AffinityKey, RequestID: req.ID,
		Tools: len(req.Tools) > 0, Structured: req.Structured != nil, Mode: req.Mode, Now: time.Now()}
	if kind == "router" {
		if req.Endpoint != EndpointCompletions {
			for _, m := range req.Messages {
				if m.Role == "user" {
					q.Turns++
				}
			}
		}
		text := promptText(req)
		q.PromptTokens = p.estimateTokens(req.Model, text)
		if url, timeout, need := p.catalog.NeedsLabel(req.Model); need {
			q.Label = p.classify(ctx, url, timeout, req, text, q.PromptTokens)
		}
	}
	d, ok, err = p.catalog.Resolve(q)
	var nr *catalog.NoRuleError
	if errors.As(err, &nr) {
		return d, ok, &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: "model", Code: "no_route",
			Message: fmt.Sprintf("no rule of the model router %q matches this request; name a model instead", nr.Router)}
	}
	if err != nil || !ok {
		return d, ok, err
	}
	if d.Gone {
		msg := fmt.Sprintf("The model `%s` was retired on %s.", d.Model, d.Sunset.UTC().Format(time.DateOnly))
		if d.Replacement != "" {
			msg += fmt.Sprintf(" Use `%s` instead.", d.Replacement)
		}
		return d, ok, &Error{Status: http.StatusGone, Type: TypeInvalidRequest, Param: "model", Code: "model_retired", Message: msg}
	}
	return d, true, nil
}

// choiceNote is the decision as the usage row and the log keep it:
// router/rule, or alias/role; "" for a model named directly.
func choiceNote(d *ModelChoice) string {
	switch {
	case d == nil:
		return ""
	case d.Router != "":
		return d.Router + "/" + d.Rule
	case d.Alias != "":
		return d.Alias + "/" + d.Role
	case d.Role == catalog.RoleFallback:
		return d.Asked + "/" + d.Role
	}
	return ""
}

// promptText is the request's input as its user wrote it: the messages'
// contents, one per line, or the completion prompt.
func promptText(req *Request) string {
	if req.Endpoint == EndpointCompletions {
		return req.Prompt
	}
	var b strings.Builder
	for i, m := range req.Messages {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(string(m.Content))
	}
	return b.String()
}

// estimateTokens counts text's tokens for a router's rules, before a
// model is chosen: with the tokenizer of the router's default model when
// this node's own executor serves it (an upstream's would cost a round
// trip), else as UTF-8 bytes over four (the usual rule of
// thumb for English).
func (p *Pipeline) estimateTokens(name, text string) int {
	if m := p.models.Get(p.catalog.RouterDefault(name)); m != nil && m.Text != nil && m.Target == nil {
		return len(m.Text.Prompt(text, false))
	}
	return (len(text) + 3) / 4
}

// classifyRequest and classifyAnswer are the wire format of a router's
// classifier hook: it gets the request's text and answers with a label.
type classifyRequest struct {
	Model        string `json:"model"`
	Text         string `json:"text"`
	PromptTokens int    `json:"prompt_tokens"`
	Mode         string `json:"mode,omitempty"`
	Tier         string `json:"tier,omitempty"`
}

type classifyAnswer struct {
	Label string `json:"label"`
}

// maxClassifyText bounds the text sent to a classifier.
const maxClassifyText = 16 << 10

// classify asks a router's classifier for the request's label, within
// timeout; on any failure the label is "" and the rules decide alone.
func (p *Pipeline) classify(ctx context.Context, url string, timeout time.Duration, req *Request, text string, tokens int) string {
	if len(text) > maxClassifyText {
		text = text[:maxClassifyText]
	}
	body, _ := json.Marshal(classifyRequest{Model: req.Model, Text: text, PromptTokens: tokens, Mode: req.Mode,
		Tier: req.Principal.Tier})
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return ""
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := p.httpc.Do(hr)
	if err != nil {
		p.log.Warn("router classifier failed; the rules decide without a label", "request_id", req.ID, "url", url,
			"err", err, "ms", time.Since(start).Milliseconds())
		return ""
	}
	defer resp.Body.Close()
	var a classifyAnswer
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&a) != nil {
		p.log.Warn("router classifier answered badly; the rules decide without a label", "request_id", req.ID,
			"url", url, "status", resp.StatusCode)
		return ""
	}
	return capText(a.Label, 64)
}
