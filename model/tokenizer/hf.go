package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Hugging Face tokenizers: a model directory's tokenizer.json (the
// `tokenizers` library's serialisation) and tokenizer_config.json (special
// tokens, add_bos_token, the chat template), as vLLM and SGLang load them.
// Byte-level BPE vocabularies are read (Llama 3, Qwen 2/2.5/3, DeepSeek,
// Phi-4, GPT-2 and most other models served today), into the same
// Tokenizer that a GGUF file's tokenizer.ggml.* keys give, the way
// llama.cpp's converter maps them.

// HFConfig is what a Hugging Face model directory says besides the
// vocabulary: the chat template and the special tokens' texts.
type HFConfig struct {
	// ChatTemplate is tokenizer_config.json's chat_template (its "default"
	// one when it names several), or chat_template.jinja's text; "" when
	// the directory has none.
	ChatTemplate string
	// BOS and EOS are the texts of bos_token and eos_token ("" for none).
	BOS, EOS string
}

// hfMaxFile bounds tokenizer.json (Llama 3's is 9 MB, Qwen's 11 MB,
// Gemma 3's 33 MB).
const hfMaxFile = 256 << 20

// NewFromHFDir builds the tokenizer of a Hugging Face model directory:
// tokenizer.json, and tokenizer_config.json and chat_template.jinja when
// present.
func NewFromHFDir(dir string) (*Tokenizer, HFConfig, error) {
	tj, err := hfReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, HFConfig{}, err
	}
	cj, err := hfReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, HFConfig{}, err
	}
	tok, cfg, err := NewFromHF(tj, cj)
	if err != nil {
		return nil, HFConfig{}, fmt.Errorf("%s: %w", dir, err)
	}
	if cfg.ChatTemplate == "" {
		b, err := hfReadFile(filepath.Join(dir, "chat_template.jinja"))
		switch {
		case err == nil:
			cfg.ChatTemplate = string(b)
		case !errors.Is(err, fs.ErrNotExist):
			return nil, HFConfig{}, err
		}
	}
	return tok, cfg, nil
}

func hfReadFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > hfMaxFile {
		return nil, fmt.Errorf("%s: %d bytes, more than the limit of %d", path, st.Size(), hfMaxFile)
	}
	return os.ReadFile(path)
}

// hfTokenizerJSON is the part of tokenizer.json read here.
type hfTokenizerJSON struct {
	AddedTokens []struct {
		ID      int64  `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         struct {
		Type         string            `json:"type"`
		Vocab        map[string]int64  `json:"vocab"`
		Merges       []json.RawMessage `json:"merges"`
		ByteFallback bool              `json:"byte_fallback"`
	} `json:"model"`
}

// hfStep is one normalizer, pre-tokenizer, post-processor or decoder
// (and the fields of the kinds read here).
type hfStep struct {
	Type    string `json:"type"`
	Pattern struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior string          `json:"behavior"`
	Invert   bool            `json:"invert"`
	UseRegex *bool           `json:"use_regex"`
	Prefix   bool            `json:"add_prefix_space"`
	Steps    []hfStep        `json:"pretokenizers"`
	Single   json.RawMessage `json:"single"`
	Procs    []hfStep        `json:"processors"`
}

// hfPreRegexes are the split patterns of the pre-tokenizers this package
// implements, as tokenizer.json writes them, and the tokenizer.ggml.pre
// names llama.cpp gives them.
var hfPreRegexes = map[string]string{
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`: "llama-bpe",
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:      "qwen2",
	`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`:                                          "gpt-2",
}

// NewFromHF builds a tokenizer from tokenizer.json and (optional, nil for
// none) tokenizer_config.json. Like New it checks everything; what it does
// not implement (WordPiece and Unigram models, SentencePiece-style BPE with
// byte fallback, other pre-tokenizers and normalizers) wraps
// ErrUnsupported, so a caller can fall back to another way of counting.
func NewFromHF(tokenizerJSON, configJSON []byte) (*Tokenizer, HFConfig, error) {
	var tj hfTokenizerJSON
	if err := json.Unmarshal(tokenizerJSON, &tj); err != nil {
		return nil, HFConfig{}, fmt.Errorf("tokenizer.json: %w", err)
	}
	cfg, addBOS, err := hfParseConfig(configJSON)
	if err != nil {
		return nil, HFConfig{}, err
	}
	if tj.Model.Type != "BPE" {
		return nil, HFConfig{}, fmt.Errorf("%w: tokenizer.json model %s (byte-level BPE is supported)", ErrUnsupported, tokQuote(tj.Model.Type))
	}
	if tj.Model.ByteFallback {
		return nil, HFConfig{}, fmt.Errorf("%w: tokenizer.json BPE with byte_fallback (SentencePiece-style; byte-level BPE is supported)", ErrUnsupported)
	}
	pre, err := hfPre(tj.PreTokenizer)
	if err != nil {
		return nil, HFConfig{}, err
	}
	if err := hfCheckNormalizer(tj.Normalizer); err != nil {
		return nil, HFConfig{}, err
	}

	v := Vocab{Model: "gpt2", Pre: pre, BOS: -1, EOS: -1, EOT: -1, EOM: -1, UNK: -1, PAD: -1}
	n := int64(len(tj.Model.Vocab))
	for _, at := range tj.AddedTokens {
		n = max(n, at.ID+1)
	}
	if n == 0 {
		return nil, HFConfig{}, tokVocabErr("tokenizer.json model.vocab", -1, "empty")
	}
	if n > tokMaxVocab {
		return nil, HFConfig{}, tokVocabErr("tokenizer.json model.vocab", -1, "ids up to %d, more than the limit of %d tokens", n-1, tokMaxVocab)
	}
	v.Tokens = make([]string, n)
	v.Types = make([]int32, n)
	set := func(where string, id int64, text string, typ int32) error {
		if id < 0 || id >= n {
			return tokVocabErr(where, -1, "token id %d out of range", id)
		}
		if v.Tokens[id] != "" && v.Tokens[id] != text {
			return tokVocabErr(where, int(id), "two tokens with id %d: %s and %s", id, tokQuote(v.Tokens[id]), tokQuote(text))
		}
		v.Tokens[id], v.Types[id] = text, typ
		return nil
	}
	for text, id := range tj.Model.Vocab {
		if err := set("tokenizer.json model.vocab", id, text, TokenTypeNormal); err != nil {
			return nil, HFConfig{}, err
		}
	}
	for _, at := range tj.AddedTokens {
		// llama.cpp's converter: added tokens that are special, or look
		// like <|...|>, are control tokens; the others user-defined. An
		// added token's text is plain text, not byte-level encoded.
		typ := int32(TokenTypeUserDefined)
		if at.Special || (strings.HasPrefix(at.Content, "<|") && strings.HasSuffix(at.Content, "|>")) {
			typ = TokenTypeControl
		}
		text := at.Content
		if typ == TokenTypeUserDefined {
			text = strings.ReplaceAll(text, "\u2581", " ")
		}
		if at.ID >= 0 && at.ID < n && v.Tokens[at.ID] != "" {
			// An added token that is also in the vocabulary keeps its
			// vocabulary text and takes the added type.
			v.Types[at.ID] = typ
			continue
		}
		if err := set("tokenizer.json added_tokens", at.ID, text, typ); err != nil {
			return nil, HFConfig{}, err
		}
	}
	for i, s := range v.Tokens {
		if s == "" {
			// Ids no token has: padding entries, as the converter writes.
			v.Tokens[i], v.Types[i] = fmt.Sprintf("[PAD%d]", i), TokenTypeUnused
		}
	}

	v.Merges = make([]string, len(tj.Model.Merges))
	for i, raw := range tj.Model.Merges {
		m, err := hfMerge(raw)
		if err != nil {
			return nil, HFConfig{}, tokVocabErr("tokenizer.json model.merges", i, "%v", err)
		}
		v.Merges[i] = m
	}

	ids := func(text string) int32 {
		if text == "" {
			return -1
		}
		for i, s := range v.Tokens {
			if s == text {
				return int32(i)
			}
		}
		return -1
	}
	v.BOS, v.EOS = ids(cfg.BOS), ids(cfg.EOS)
	switch {
	case addBOS != nil:
		v.AddBOS = *addBOS
	default:
		v.AddBOS = hfPostAddsBOS(tj.PostProcessor, cfg.BOS)
	}
	tok, err := NewFromVocab(v)
	if err != nil {
		return nil, HFConfig{}, err
	}
	return tok, cfg, nil
}

// hfMerge reads a merge: "A B" (older files) or ["A", "B"].
func hfMerge(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var pair []string
	if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
		return "", fmt.Errorf("want \"A B\" or [\"A\", \"B\"], got %.40s", raw)
	}
	if strings.Contains(pair[0], " ") || strings.Contains(pair[1], " ") {
		return "", fmt.Errorf("a merge piece with a space: %.40s", raw)
	}
	return pair[0] + " " + pair[1], nil
}

// hfPre maps the pre-tokenizer to tokenizer.ggml.pre: a byte-level one,
// alone (GPT-2's regex) or after a Split by a known regex.
func hfPre(raw json.RawMessage) (string, error) {
	var st hfStep
	if len(raw) == 0 || string(raw) == "null" {
		return "", fmt.Errorf("%w: tokenizer.json has no pre_tokenizer (byte-level BPE needs one)", ErrUnsupported)
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return "", fmt.Errorf("tokenizer.json pre_tokenizer: %w", err)
	}
	steps := []hfStep{st}
	if st.Type == "Sequence" {
		steps = st.Steps
	}
	pre := ""
	byteLevel := false
	for _, s := range steps {
		switch s.Type {
		case "Split":
			if pre != "" || s.Pattern.Regex == nil || s.Behavior != "Isolated" || s.Invert {
				return "", fmt.Errorf("%w: tokenizer.json pre_tokenizer Split (%s)", ErrUnsupported, hfShort(raw))
			}
			name, ok := hfPreRegexes[*s.Pattern.Regex]
			if !ok {
				return "", fmt.Errorf("%w: tokenizer.json pre_tokenizer regex %s", ErrUnsupported, tokQuote(*s.Pattern.Regex))
			}
			pre = name
		case "ByteLevel":
			if s.Prefix {
				return "", fmt.Errorf("%w: tokenizer.json ByteLevel pre_tokenizer with add_prefix_space", ErrUnsupported)
			}
			if s.UseRegex == nil || *s.UseRegex {
				if pre != "" {
					return "", fmt.Errorf("%w: tokenizer.json pre_tokenizer splits twice", ErrUnsupported)
				}
				pre = "gpt-2"
			}
			byteLevel = true
		default:
			return "", fmt.Errorf("%w: tokenizer.json pre_tokenizer %s", ErrUnsupported, tokQuote(s.Type))
		}
	}
	if !byteLevel || pre == "" {
		return "", fmt.Errorf("%w: tokenizer.json pre_tokenizer %s (a byte-level BPE split is supported)", ErrUnsupported, hfShort(raw))
	}
	return pre, nil
}

// hfCheckNormalizer accepts no normalizer and NFC (Qwen's: text that is
// already composed, as nearly all text is, is unchanged; llama.cpp skips
// it too).
func hfCheckNormalizer(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var st hfStep
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("tokenizer.json normalizer: %w", err)
	}
	if st.Type == "NFC" {
		return nil
	}
	return fmt.Errorf("%w: tokenizer.json normalizer %s", ErrUnsupported, tokQuote(st.Type))
}

// hfPostAddsBOS reports whether the post-processor puts bos first in a
// single sequence (Llama 3's TemplateProcessing).
func hfPostAddsBOS(raw json.RawMessage, bos string) bool {
	if bos == "" || len(raw) == 0 {
		return false
	}
	var st hfStep
	if json.Unmarshal(raw, &st) != nil {
		return false
	}
	steps := []hfStep{st}
	if st.Type == "Sequence" {
		steps = st.Procs
	}
	for _, s := range steps {
		if s.Type != "TemplateProcessing" {
			continue
		}
		var single []struct {
			Special *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
		}
		if json.Unmarshal(s.Single, &single) == nil && len(single) > 0 && single[0].Special != nil {
			return single[0].Special.ID == bos
		}
	}
	return false
}

// hfParseConfig reads tokenizer_config.json: the chat template, the
// special tokens' texts (a string or an AddedToken object) and
// add_bos_token (nil when it does not say).
func hfParseConfig(b []byte) (HFConfig, *bool, error) {
	var cfg HFConfig
	if len(bytes.TrimSpace(b)) == 0 {
		return cfg, nil, nil
	}
	var raw struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
		AddBOS       *bool           `json:"add_bos_token"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return cfg, nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	var err error
	if cfg.BOS, err = hfTokenText(raw.BOS); err != nil {
		return cfg, nil, fmt.Errorf("tokenizer_config.json bos_token: %w", err)
	}
	if cfg.EOS, err = hfTokenText(raw.EOS); err != nil {
		return cfg, nil, fmt.Errorf("tokenizer_config.json eos_token: %w", err)
	}
	if len(raw.ChatTemplate) > 0 && string(raw.ChatTemplate) != "null" {
		var s string
		if json.Unmarshal(raw.ChatTemplate, &s) == nil {
			cfg.ChatTemplate = s
		} else {
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(raw.ChatTemplate, &named); err != nil {
				return cfg, nil, fmt.Errorf("tokenizer_config.json chat_template: want a string or a list of {name, template}")
			}
			for i, t := range named {
				if t.Name == "default" || i == 0 {
					cfg.ChatTemplate = t.Template
				}
			}
		}
	}
	return cfg, raw.AddBOS, nil
}

// hfTokenText reads a special token: null, "text" or {"content": "text"}.
func hfTokenText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("want a string or {\"content\": ...}, got %s", hfShort(raw))
	}
	return obj.Content, nil
}

func hfShort(raw json.RawMessage) string {
	if len(raw) > 80 {
		return string(raw[:80]) + "..."
	}
	return string(raw)
}
