package grammar

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
)

func (c *schemaCompiler) str(v *jsonValue, path, hint string) (string, error) {
	lo, err := count(v, "minLength", path, 0)
	if err != nil {
		return "", err
	}
	hi, err := count(v, "maxLength", path, unbounded)
	if err != nil {
		return "", err
	}
	if hi != unbounded && hi < lo {
		return "", &SchemaError{At: path, Msg: "maxLength is below minLength"}
	}
	pattern, format := v.get("pattern"), v.get("format")
	if pattern != nil && pattern.kind != jsonString || format != nil && format.kind != jsonString {
		return "", &SchemaError{At: path, Msg: "pattern and format must be strings"}
	}
	quote, sp := `"\""`, c.prim("space")
	switch {
	case pattern != nil && format != nil:
		return "", &UnsupportedError{Feature: `keyword "pattern" together with "format"`, At: path}
	case format != nil:
		f := format.s
		fl, ok := formatLengths[f]
		if !ok {
			return "", &UnsupportedError{Feature: fmt.Sprintf("format %q", f), At: path}
		}
		if lo > fl[0] || hi != unbounded && hi < fl[1] {
			return "", &UnsupportedError{Feature: fmt.Sprintf(`format %q together with "minLength" or "maxLength"`, f), At: path}
		}
		return quote + " " + c.prim(f) + " " + quote + " " + sp, nil
	case pattern != nil:
		body, err := c.pattern(pattern.s, lo, hi, path, hint)
		if err != nil {
			return "", err
		}
		return quote + " " + body + " " + quote + " " + sp, nil
	case lo == 0 && hi == unbounded:
		return c.prim("string"), nil
	}
	return quote + " " + c.rs.repeat(c.prim("char"), lo, hi, hint+"-chars") + " " + quote + " " + sp, nil
}

// pattern compiles the contents of a string in which the regular
// expression finds a match, lo to hi characters long.
func (c *schemaCompiler) pattern(pattern string, lo, hi int, path, hint string) (string, error) {
	at := path + "/pattern"
	branches, err := parseRegex(pattern)
	if err != nil {
		var ue *UnsupportedError
		if errors.As(err, &ue) {
			return "", &UnsupportedError{Feature: ue.Feature, At: at + " " + ue.At}
		}
		return "", &SchemaError{At: at, Msg: err.Error()}
	}
	anything := &reNode{op: reRepeat, subs: []*reNode{{op: reChars, ranges: anyChar}}, min: 0, max: unbounded}
	var alts []*reNode
	for _, b := range branches {
		parts := []*reNode{b.node}
		if b.node.op == reEmpty && !b.start && !b.end {
			parts = nil // a search for "" finds it in anything
		}
		if !b.start {
			parts = append([]*reNode{anything}, parts...)
		}
		if !b.end {
			parts = append(parts, anything)
		}
		n := newConcat(parts)
		if lo > 0 || hi != unbounded {
			var ok bool
			if n, ok = restrictLength(n, lo, hi); !ok {
				return "", &UnsupportedError{Feature: `keyword "pattern" with "minLength" or "maxLength" that do not fold into one repetition of the pattern`, At: path}
			}
		}
		if _, _, ok := n.lengths(); ok {
			alts = append(alts, n)
		}
	}
	if len(alts) == 0 {
		return "", &SchemaError{At: at, Msg: "no string matches the pattern within minLength and maxLength"}
	}
	e := &reEmitter{rs: c.rs, hint: hint + "-pattern", json: true, char: c.prim("char")}
	return e.emit(newAlt(alts)).text, nil
}

// numeric compiles integer or number with their bounds.
func (c *schemaCompiler) numeric(v *jsonValue, path string, integer bool) (string, error) {
	lo, loEx, loKey, err := bound(v, "minimum", "exclusiveMinimum", path, 1)
	if err != nil {
		return "", err
	}
	hi, hiEx, hiKey, err := bound(v, "maximum", "exclusiveMaximum", path, -1)
	if err != nil {
		return "", err
	}
	if lo == nil && hi == nil {
		if integer {
			return c.prim("integer"), nil
		}
		return c.prim("number"), nil
	}
	sp := c.prim("space")
	var loI, hiI *big.Int
	if integer {
		// The integers within: round the bounds inwards.
		if lo != nil {
			loI = ceilRat(lo)
			if loEx && lo.IsInt() {
				loI.Add(loI, big.NewInt(1))
			}
		}
		if hi != nil {
			hiI = floorRat(hi)
			if hiEx && hi.IsInt() {
				hiI.Sub(hiI, big.NewInt(1))
			}
		}
		loEx, hiEx = false, false
	} else {
		for _, b := range []struct {
			r   *big.Rat
			key string
		}{{lo, loKey}, {hi, hiKey}} {
			if b.r != nil && !b.r.IsInt() {
				return "", &UnsupportedError{Feature: fmt.Sprintf(`keyword %q with the fractional value %s on a number`, b.key, b.r.FloatString(6)), At: path}
			}
		}
		if lo != nil {
			loI = new(big.Int).Set(lo.Num())
		}
		if hi != nil {
			hiI = new(big.Int).Set(hi.Num())
		}
	}
	for _, b := range []*big.Int{loI, hiI} {
		if b != nil && len(new(big.Int).Abs(b).String()) > maxBoundDigits {
			return "", &SchemaError{At: path, Msg: fmt.Sprintf("a bound of over %d digits", maxBoundDigits)}
		}
	}
	zero := new(big.Int)
	var alts []string
	// x ≥ 0: magnitudes from max(lo, 0) to hi.
	if hiI == nil || hiI.Sign() > 0 || hiI.Sign() == 0 && !hiEx {
		a, aEx := zero, false
		if loI != nil && loI.Sign() >= 0 {
			a, aEx = loI, loEx
		}
		if m := magnitudes(a, aEx, hiI, hiEx, integer); m != "" {
			alts = append(alts, m)
		}
	}
	// x < 0: magnitudes from max(-hi, 0) (excluded if 0) to -lo.
	if loI == nil || loI.Sign() < 0 {
		a, aEx := zero, true
		if hiI != nil && hiI.Sign() < 0 {
			a, aEx = new(big.Int).Neg(hiI), hiEx
		}
		var b *big.Int
		if loI != nil {
			b = new(big.Int).Neg(loI)
		}
		if integer && aEx { // magnitudes above 0
			a, aEx = new(big.Int).Add(a, big.NewInt(1)), false
		}
		if m := magnitudes(a, aEx, b, loEx, integer); m != "" {
			alts = append(alts, `"-" `+wrap(m))
		}
	}
	if len(alts) == 0 {
		return "", &SchemaError{At: path, Msg: "no number lies within the bounds"}
	}
	m := alternatives(alts)
	if refersTo(m, "frac-nz") {
		c.prim("frac-nz")
	}
	if len(alts) == 1 {
		m = wrap(m)
	}
	return prefixRefs(m, c.rs.prefix) + " " + sp, nil
}

// wrap parenthesizes an expression unless it is one item already.
func wrap(e string) string {
	if isItem(e) {
		return e
	}
	return "( " + e + " )"
}

// isItem reports whether GBNF expression e is one item: a name, literal,
// class or group, without a repetition suffix.
func isItem(e string) bool {
	depth := 0
	for i := 0; i < len(e); i++ {
		c := e[i]
		switch c {
		case '"', '[':
			end := byte('"')
			if c == '[' {
				end = ']'
			}
			for i++; i < len(e) && e[i] != end; i++ {
				if e[i] == '\\' {
					i++
				}
			}
		case '(':
			depth++
		case ')':
			depth--
		case ' ', '|', '?', '*', '+', '{':
			if depth == 0 {
				return false
			}
		}
		if depth == 0 && i < len(e)-1 && (c == ')' || c == '"' || c == ']') {
			return false
		}
	}
	return true
}

// bound reads a lower (dir 1) or upper (dir -1) bound: the tighter of the
// inclusive and exclusive keywords, and the keyword it came from.
func bound(v *jsonValue, incKey, exKey, path string, dir int) (*big.Rat, bool, string, error) {
	var r *big.Rat
	ex := false
	key := ""
	for _, k := range []string{incKey, exKey} {
		x := v.get(k)
		if x == nil {
			continue
		}
		b := parseRat(x.s)
		if x.kind != jsonNumber || b == nil {
			return nil, false, "", &SchemaError{At: path + "/" + k, Msg: k + " must be a number"}
		}
		if r == nil || b.Cmp(r)*dir > 0 || b.Cmp(r) == 0 && k == exKey {
			r, ex, key = b, k == exKey, k
		}
	}
	return r, ex, key, nil
}

func floorRat(r *big.Rat) *big.Int { return new(big.Int).Div(r.Num(), r.Denom()) }

func ceilRat(r *big.Rat) *big.Int {
	f := floorRat(r)
	if !r.IsInt() {
		f.Add(f, big.NewInt(1))
	}
	return f
}

// magnitudes writes unsigned decimals from a to b (nil: no bound), each
// end excluded or not, integers only or with a fraction; "" if there are
// none. The integer part has at most 16 digits, or as many as a has.
func magnitudes(a *big.Int, aEx bool, b *big.Int, bEx bool, integer bool) string {
	digits := max(maxIntDigits, len(a.String()))
	top := new(big.Int).Sub(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(digits)), nil), big.NewInt(1))
	if b != nil && b.Cmp(top) > 0 {
		b, bEx = nil, false
	}
	one := big.NewInt(1)
	if integer {
		hi := top
		if b != nil {
			hi = b
		}
		if a.Cmp(hi) > 0 {
			return ""
		}
		return uintRange(a, hi)
	}
	const (
		fracAny  = `( "." [0-9]{1,16} )?`
		fracZero = `( "." "0"{1,16} )?`
		fracNZ   = `frac-nz`
	)
	var alts []string
	plus1 := new(big.Int).Add(a, one)
	switch {
	case b == nil:
		if !aEx {
			alts = append(alts, wrap(uintRange(a, top))+" "+fracAny)
			break
		}
		alts = append(alts, gbnfLiteral(a.String())+" "+fracNZ)
		if plus1.Cmp(top) <= 0 {
			alts = append(alts, wrap(uintRange(plus1, top))+" "+fracAny)
		}
	case a.Cmp(b) > 0:
		return ""
	case a.Cmp(b) == 0:
		if aEx || bEx {
			return ""
		}
		alts = append(alts, gbnfLiteral(a.String())+" "+fracZero)
	default:
		below := new(big.Int).Sub(b, one)
		if !aEx {
			alts = append(alts, wrap(uintRange(a, below))+" "+fracAny)
		} else {
			alts = append(alts, gbnfLiteral(a.String())+" "+fracNZ)
			if plus1.Cmp(below) <= 0 {
				alts = append(alts, wrap(uintRange(plus1, below))+" "+fracAny)
			}
		}
		if !bEx {
			alts = append(alts, gbnfLiteral(b.String())+" "+fracZero)
		}
	}
	return alternatives(alts)
}

// uintRange writes the decimal numerals (no sign, no leading zeros) of the
// integers from a to b, 0 ≤ a ≤ b, as llama.cpp's converter does: by
// number of digits, then digit by digit.
func uintRange(a, b *big.Int) string {
	as, bs := a.String(), b.String()
	var alts []string
	for n := len(as); n <= len(bs); {
		lo, hi := "1"+strings.Repeat("0", n-1), strings.Repeat("9", n)
		if n == 1 {
			lo = "0"
		}
		if n == len(as) {
			lo = as
		}
		if n == len(bs) {
			hi = bs
		}
		// Lengths whose every numeral is in range share one item.
		full := n > 1 && lo == "1"+strings.Repeat("0", n-1) && hi == strings.Repeat("9", n)
		if !full {
			alts = append(alts, sameLength(lo, hi))
			n++
			continue
		}
		m := n
		for m+1 < len(bs) || m+1 == len(bs) && bs == strings.Repeat("9", m+1) {
			m++
		}
		switch {
		case m == n && n == 2:
			alts = append(alts, "[1-9] [0-9]")
		case m == n:
			alts = append(alts, fmt.Sprintf("[1-9] [0-9]{%d}", n-1))
		default:
			alts = append(alts, fmt.Sprintf("[1-9] [0-9]{%d,%d}", n-1, m-1))
		}
		n = m + 1
	}
	return alternatives(alts)
}

// sameLength writes the numerals from lo to hi, strings of equal length.
func sameLength(lo, hi string) string {
	n := len(lo)
	if lo == hi {
		return gbnfLiteral(lo)
	}
	digit := func(a, b byte) string {
		if a == b {
			return gbnfLiteral(string(a))
		}
		return "[" + string(a) + "-" + string(b) + "]"
	}
	if n == 1 {
		return digit(lo[0], hi[0])
	}
	if lo[0] == hi[0] {
		return gbnfLiteral(lo[:1]) + " " + sameLength(lo[1:], hi[1:])
	}
	zeros, nines := strings.Repeat("0", n-1), strings.Repeat("9", n-1)
	var alts []string
	start, end := lo[0], hi[0]
	if lo[1:] != zeros {
		alts = append(alts, gbnfLiteral(lo[:1])+" "+sameLength(lo[1:], nines))
		start++
	}
	if hi[1:] != nines {
		end--
	}
	if start <= end {
		rest := "[0-9]"
		if n > 2 {
			rest = fmt.Sprintf("[0-9]{%d}", n-1)
		}
		alts = append(alts, digit(start, end)+" "+rest)
	}
	if hi[1:] != nines {
		alts = append(alts, gbnfLiteral(hi[:1])+" "+sameLength(zeros, hi[1:]))
	}
	return alternatives(alts)
}
