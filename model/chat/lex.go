package chat

import (
	"errors"
)

// Expression tokenizer: a mirror of the library's tokenizeExpr that keeps
// each token's source text.

type tmplTokKind int

const (
	tmplTokName tmplTokKind = iota
	tmplTokInt
	tmplTokFloat
	tmplTokString
	tmplTokOp
	tmplTokComma
	tmplTokDot
	tmplTokColon
	tmplTokLParen
	tmplTokRParen
	tmplTokLBracket
	tmplTokRBracket
	tmplTokLBrace
	tmplTokRBrace
	tmplTokPipe
	tmplTokTilde
	tmplTokPower
	tmplTokFloorDiv
	tmplTokEOF
)

type tmplTok struct {
	kind tmplTokKind
	text string // source text; for strings, with quotes and escapes
}

func tmplTokenize(s string) ([]tmplTok, error) {
	var toks []tmplTok
	i := 0
	for i < len(s) {
		ch := s[i]
		switch {
		case ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r':
			i++
			continue
		case ch == '\'' || ch == '"':
			start := i
			i++
			for i < len(s) && s[i] != ch {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				i++
			}
			if i >= len(s) {
				return nil, errors.New("unterminated string")
			}
			i++
			toks = append(toks, tmplTok{tmplTokString, s[start:i]})
			continue
		case ch >= '0' && ch <= '9':
			start := i
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i++
			}
			kind := tmplTokInt
			if i < len(s) && s[i] == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' {
				kind = tmplTokFloat
				i++
				for i < len(s) && s[i] >= '0' && s[i] <= '9' {
					i++
				}
				if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
					i++
					if i < len(s) && (s[i] == '+' || s[i] == '-') {
						i++
					}
					for i < len(s) && s[i] >= '0' && s[i] <= '9' {
						i++
					}
				}
			}
			toks = append(toks, tmplTok{kind, s[start:i]})
			continue
		case ch == '_' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z':
			start := i
			for i < len(s) && tmplIsIdentByte(s[i]) {
				i++
			}
			toks = append(toks, tmplTok{tmplTokName, s[start:i]})
			continue
		}
		if i+1 < len(s) {
			switch two := s[i : i+2]; two {
			case "**":
				toks = append(toks, tmplTok{tmplTokPower, two})
				i += 2
				continue
			case "//":
				toks = append(toks, tmplTok{tmplTokFloorDiv, two})
				i += 2
				continue
			case "==", "!=", "<=", ">=":
				toks = append(toks, tmplTok{tmplTokOp, two})
				i += 2
				continue
			}
		}
		kind := tmplTokEOF // unknown characters are skipped, as in the library
		switch ch {
		case ',':
			kind = tmplTokComma
		case '.':
			kind = tmplTokDot
		case ':':
			kind = tmplTokColon
		case '(':
			kind = tmplTokLParen
		case ')':
			kind = tmplTokRParen
		case '[':
			kind = tmplTokLBracket
		case ']':
			kind = tmplTokRBracket
		case '{':
			kind = tmplTokLBrace
		case '}':
			kind = tmplTokRBrace
		case '|':
			kind = tmplTokPipe
		case '~':
			kind = tmplTokTilde
		case '+', '-', '*', '/', '%', '<', '>', '=':
			kind = tmplTokOp
		}
		if kind != tmplTokEOF {
			toks = append(toks, tmplTok{kind, string(ch)})
		}
		i++
	}
	return append(toks, tmplTok{kind: tmplTokEOF}), nil
}
