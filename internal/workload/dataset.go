package workload

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Prompt is one user message of a dataset.
type Prompt struct {
	// Text is the user message.
	Text string
	// OutputTokens is the answer length to ask for (max_tokens); 0 means
	// draw it from Spec.Output.
	OutputTokens int
}

// LoadJSONL reads a dataset file; see ParseJSONL for the format.
func LoadJSONL(path string) ([]Prompt, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ps, err := ParseJSONL(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ps, nil
}

// datasetLine is the union of the accepted line shapes.
type datasetLine struct {
	Prompt        *string `json:"prompt"`
	OutputTokens  int     `json:"output_tokens"`
	Conversations []struct {
		From  string `json:"from"`
		Value string `json:"value"`
	} `json:"conversations"`
}

// ParseJSONL reads one prompt per line of r:
//
//	{"prompt": "Explain paging.", "output_tokens": 200}
//
// output_tokens is optional. ShareGPT-like lines are accepted too:
//
//	{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}]}
//
// they give the first human message as the prompt and, as vLLM's
// benchmark does, the length of the reply after it (ApproxTokens) as
// output_tokens; a line without a human message is skipped. A JSON array
// of such objects (a ShareGPT file) is also accepted. Blank lines are
// ignored; any other malformed line is an error naming its number.
func ParseJSONL(r io.Reader) ([]Prompt, error) {
	br := bufio.NewReader(r)
	first, err := firstNonSpace(br)
	if err != nil {
		return nil, err
	}
	var out []Prompt
	if first == '[' {
		var lines []datasetLine
		if err := json.NewDecoder(br).Decode(&lines); err != nil {
			return nil, fmt.Errorf("invalid JSON array: %w", err)
		}
		for i, l := range lines {
			p, ok, err := l.prompt()
			if err != nil {
				return nil, fmt.Errorf("entry %d: %w", i+1, err)
			}
			if ok {
				out = append(out, p)
			}
		}
		if len(out) == 0 {
			return nil, errors.New("no prompts")
		}
		return out, nil
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, 1<<16), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var l datasetLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		p, ok, err := l.prompt()
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if ok {
			out = append(out, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no prompts")
	}
	return out, nil
}

// prompt converts l; ok is false for a conversation without a human turn.
func (l datasetLine) prompt() (Prompt, bool, error) {
	if l.Prompt != nil {
		if *l.Prompt == "" {
			return Prompt{}, false, errors.New("empty prompt")
		}
		if l.OutputTokens < 0 {
			return Prompt{}, false, errors.New("output_tokens must be >= 0")
		}
		return Prompt{Text: *l.Prompt, OutputTokens: l.OutputTokens}, true, nil
	}
	if l.Conversations == nil {
		return Prompt{}, false, errors.New(`want a "prompt" or a "conversations" field`)
	}
	for i, m := range l.Conversations {
		if (m.From == "human" || m.From == "user") && m.Value != "" {
			p := Prompt{Text: m.Value, OutputTokens: l.OutputTokens}
			if p.OutputTokens == 0 && i+1 < len(l.Conversations) {
				p.OutputTokens = ApproxTokens(l.Conversations[i+1].Value)
			}
			return p, true, nil
		}
	}
	return Prompt{}, false, nil
}

// firstNonSpace peeks at the first byte of r that is not white space.
func firstNonSpace(r *bufio.Reader) (byte, error) {
	for {
		b, err := r.Peek(1)
		if err == io.EOF {
			return 0, errors.New("no prompts")
		}
		if err != nil {
			return 0, err
		}
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			r.Discard(1)
		default:
			return b[0], nil
		}
	}
}
