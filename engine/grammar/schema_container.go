package grammar

import (
	"fmt"
	"slices"
	"strings"
)

// property is one declared property of an object schema.
type property struct {
	key      string
	expr     string
	required bool
}

func (c *schemaCompiler) object(v *jsonValue, path, hint string) (string, error) {
	saved := c.chain
	c.chain = map[string]bool{}
	defer func() { c.chain = saved }()

	props := v.get("properties")
	if props != nil && props.kind != jsonObject {
		return "", &SchemaError{At: path + "/properties", Msg: "properties must be an object"}
	}
	var reqOrder []string
	req := map[string]bool{}
	if r := v.get("required"); r != nil {
		if r.kind != jsonArray {
			return "", &SchemaError{At: path + "/required", Msg: "required must be an array of strings"}
		}
		for _, e := range r.elems {
			if e.kind != jsonString {
				return "", &SchemaError{At: path + "/required", Msg: "required must be an array of strings"}
			}
			if !req[e.s] {
				req[e.s] = true
				reqOrder = append(reqOrder, e.s)
			}
		}
	}
	// extra is the schema of properties not declared; "" allows none.
	var extra string
	switch addl := v.get("additionalProperties"); {
	case addl == nil && props == nil:
		extra = c.prim("value")
	case addl == nil || addl.kind == jsonBool && !addl.b:
	default:
		e, err := c.schema(addl, path+"/additionalProperties", hint+"-additional")
		if err != nil {
			return "", err
		}
		extra = c.item(e, hint+"-additional")
	}
	var decl []property
	var names []string
	if props != nil {
		for i, key := range props.keys {
			names = append(names, key)
			s := props.vals[i]
			if s.kind == jsonBool && !s.b {
				if req[key] {
					return "", &SchemaError{At: path + "/required", Msg: fmt.Sprintf("property %q is required but its schema is false", key)}
				}
				continue
			}
			e, err := c.schema(s, path+"/properties/"+pointerEscape(key), hint+"-"+key)
			if err != nil {
				return "", err
			}
			decl = append(decl, property{key, c.item(e, hint+"-"+key), req[key]})
		}
	}
	if props == nil && len(reqOrder) == 0 && extra == c.prims["value"] {
		return c.prim("object"), nil
	}
	for _, key := range reqOrder {
		if slices.Contains(names, key) {
			continue
		}
		if extra == "" {
			return "", &SchemaError{At: path + "/required", Msg: fmt.Sprintf("property %q is required but not allowed: it is not in properties, and additionalProperties is false or absent", key)}
		}
		decl = append(decl, property{key, extra, true})
		names = append(names, key)
	}
	return c.objectBody(decl, names, extra, hint), nil
}

// objectBody writes an object with the declared properties in order,
// optional ones present or not, then extra properties (not named in
// names) with values matching extra, if extra is set.
func (c *schemaCompiler) objectBody(decl []property, names []string, extra, hint string) string {
	sp := c.prim("space")
	open, close, comma := `"{" `+sp, `"}" `+sp, `"," `+sp
	kv := func(key, value string) string {
		return key + ` ":" ` + sp + " " + value
	}
	var xkv string
	if extra != "" {
		key := c.prim("string")
		if len(names) > 0 {
			key = `"\"" ` + c.notKeys(newKeyTrie(names), hint+"-key") + ` "\"" ` + sp
		}
		xkv = c.rs.add(hint+"-extra-kv", kv(key, extra))
	}
	more := "" // the extras after a property
	if xkv != "" {
		more = "( " + comma + " " + xkv + " )*"
	}
	if len(decl) == 0 {
		if xkv == "" {
			return open + " " + close
		}
		return open + " ( " + xkv + " " + more + " )? " + close
	}
	allRequired := true
	for _, p := range decl {
		allRequired = allRequired && p.required
	}
	if allRequired {
		parts := []string{open}
		for i, p := range decl {
			if i > 0 {
				parts = append(parts, comma)
			}
			parts = append(parts, kv(gbnfLiteral(quoteJSON(p.key))+" "+sp, p.expr))
		}
		if more != "" {
			parts = append(parts, more)
		}
		return strings.Join(append(parts, close), " ")
	}
	kvs := make([]string, len(decl))
	for i, p := range decl {
		kvs[i] = c.rs.add(hint+"-"+p.key+"-kv", kv(gbnfLiteral(quoteJSON(p.key))+" "+sp, p.expr))
	}
	// rest(i) is the properties from i on, after one was written.
	restRules := map[int]string{}
	var rest func(i int) string
	rest = func(i int) string {
		if i == len(decl) {
			return more
		}
		if r, ok := restRules[i]; ok {
			return r
		}
		name := c.rs.reserve(fmt.Sprintf("%s-rest-%d", hint, i))
		restRules[i] = name
		item := comma + " " + kvs[i]
		if !decl[i].required {
			item = "( " + item + " )?"
		}
		_ = c.rs.define(name, strings.TrimSpace(item+" "+rest(i+1)))
		return name
	}
	var alts []string
	for j, p := range decl {
		alts = append(alts, strings.TrimSpace(kvs[j]+" "+rest(j+1)))
		if p.required {
			break
		}
	}
	group := "( " + strings.Join(alts, " | ") + " )"
	if !decl[len(alts)-1].required { // all optional
		if xkv != "" {
			group = "( " + strings.Join(append(alts, xkv+" "+more), " | ") + " )"
		}
		group += "?"
	}
	return open + " " + group + " " + close
}

// keyTrie holds property names, to write the names that are none of
// them.
type keyTrie struct {
	next map[rune]*keyTrie
	end  bool
}

func newKeyTrie(names []string) *keyTrie {
	root := &keyTrie{next: map[rune]*keyTrie{}}
	for _, n := range names {
		t := root
		for _, r := range n {
			if t.next[r] == nil {
				t.next[r] = &keyTrie{next: map[rune]*keyTrie{}}
			}
			t = t.next[r]
		}
		t.end = true
	}
	return root
}

// notKeys returns a rule matching the contents of a JSON string (without
// \u escapes) that, after the characters leading to t, spell none of the
// names in the trie.
func (c *schemaCompiler) notKeys(t *keyTrie, hint string) string {
	kchar := c.prim("kchar")
	var children []rune
	for r := range t.next {
		children = append(children, r)
	}
	slices.Sort(children)
	var cs []rng
	for _, r := range children {
		cs = append(cs, rng{r, r})
	}
	var alts []string
	if !t.end {
		alts = append(alts, `""`)
	}
	// Any other character, then anything.
	var other []string
	if raw := subtract(jsonRaw, cs); len(raw) > 0 {
		other = append(other, gbnfClass(raw))
	}
	var esc []rng
	for _, r := range escapeOrder {
		if !slices.Contains(children, r) {
			e := rune(shortEscapes[r])
			esc = append(esc, rng{e, e})
		}
	}
	if len(esc) > 0 {
		other = append(other, `"\\" `+gbnfClass(normalize(esc)))
	}
	if len(other) > 0 {
		alts = append(alts, alternatives(other)+" "+kchar+"*")
	}
	// One of the names' next characters, then not the rest of a name.
	for _, r := range children {
		var encs []string
		if contains(jsonRaw, r) {
			encs = append(encs, gbnfLiteral(string(r)))
		}
		if e, ok := shortEscapes[r]; ok {
			encs = append(encs, gbnfLiteral(`\`+string(e)))
		}
		if len(encs) == 0 {
			continue // a control character without a short escape: not written
		}
		alts = append(alts, alternatives(encs)+" "+c.notKeys(t.next[r], hint))
	}
	return c.rs.shared(hint, strings.Join(alts, " | "))
}

func (c *schemaCompiler) array(v *jsonValue, path, hint string) (string, error) {
	saved := c.chain
	c.chain = map[string]bool{}
	defer func() { c.chain = saved }()

	items, prefixItems, additional := v.get("items"), v.get("prefixItems"), v.get("additionalItems")
	var prefix []*jsonValue
	var rest *jsonValue // nil: no items after the prefix
	prefixKey, restKey := "prefixItems", "items"
	switch {
	case items != nil && items.kind == jsonArray:
		if prefixItems != nil {
			return "", &SchemaError{At: path, Msg: "items as an array and prefixItems together"}
		}
		prefix, rest = items.elems, additional
		prefixKey, restKey = "items", "additionalItems"
	case additional != nil:
		return "", &UnsupportedError{Feature: `keyword "additionalItems" without an array "items"`, At: path}
	case prefixItems != nil:
		if prefixItems.kind != jsonArray {
			return "", &SchemaError{At: path + "/prefixItems", Msg: "prefixItems must be an array"}
		}
		prefix, rest = prefixItems.elems, items
	default:
		rest = items
		if rest == nil {
			rest = &jsonValue{kind: jsonBool, b: true}
		}
	}
	lo, err := count(v, "minItems", path, 0)
	if err != nil {
		return "", err
	}
	hi, err := count(v, "maxItems", path, unbounded)
	if err != nil {
		return "", err
	}
	// A prefix item false ends the array before it.
	for i, p := range prefix {
		if p.kind == jsonBool && !p.b {
			prefix, rest = prefix[:i], nil
			break
		}
	}
	var prefixExprs []string
	for i, p := range prefix {
		e, err := c.schema(p, fmt.Sprintf("%s/%s/%d", path, prefixKey, i), fmt.Sprintf("%s-%d", hint, i))
		if err != nil {
			return "", err
		}
		prefixExprs = append(prefixExprs, c.item(e, fmt.Sprintf("%s-%d", hint, i)))
	}
	var restExpr string
	if rest != nil && !(rest.kind == jsonBool && !rest.b) {
		e, err := c.schema(rest, path+"/"+restKey, hint+"-item")
		if err != nil {
			return "", err
		}
		restExpr = c.item(e, hint+"-item")
	}
	k := len(prefix)
	if restExpr == "" && (hi == unbounded || hi > k) {
		hi = k
	}
	if hi != unbounded && lo > hi {
		return "", &SchemaError{At: path, Msg: "no array has as many items as minItems requires"}
	}
	sp := c.prim("space")
	comma := `"," ` + sp
	var elems func(i int) string
	elems = func(i int) string {
		if i == hi {
			return ""
		}
		if i < k {
			it := prefixExprs[i]
			if i > 0 {
				it = comma + " " + it
			}
			next := elems(i + 1)
			if next != "" && i%8 == 7 { // keep the grammar's parentheses shallow
				next = c.rs.add(hint+"-tail", next)
			}
			it = strings.TrimSpace(it + " " + next)
			if i < lo {
				return it
			}
			return "( " + it + " )?"
		}
		a, b := max(lo-k, 0), unbounded
		if hi != unbounded {
			b = hi - k
		}
		more := "( " + comma + " " + restExpr + " )"
		if k > 0 {
			return c.rs.repeat(more, a, b, hint+"-items")
		}
		bm := unbounded
		if b != unbounded {
			bm = b - 1
		}
		seq := strings.TrimSpace(restExpr + " " + c.rs.repeat(more, max(a-1, 0), bm, hint+"-items"))
		if a == 0 {
			return "( " + seq + " )?"
		}
		return seq
	}
	return strings.Join(slices.DeleteFunc([]string{`"[" ` + sp, elems(0), `"]" ` + sp}, func(s string) bool { return s == "" }), " "), nil
}

// pointerEscape escapes a key for a JSON pointer.
func pointerEscape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
