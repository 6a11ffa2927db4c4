package toolcall

import (
	"strings"
)

// Call is one tool call read from a model's output.
type Call struct {
	Name string
	// Arguments is the raw JSON text of the call's arguments value as the
	// model wrote it (not re-serialised), "{}" when the call had no
	// arguments key, or what was written before the output ended.
	Arguments string
}

// Event is one piece of parsed output. Exactly one of Content, Name and
// Args is non-empty:
//
//   - Content is assistant text to pass through.
//   - Name starts call number Index (0, 1, ...): it comes once per call,
//     before the call's Args; the caller assigns the call's id.
//   - Args is the next fragment of call Index's arguments JSON text.
//
// Index is 0 in a Content event.
type Event struct {
	Content string
	Index   int
	Name    string
	Args    string
}

// Parse splits a whole model output into content and tool calls. It is
// defined as a [Parser] for f given text in one Push, then Finish: the
// Content of the events concatenated, and one Call per Name event with
// the Args of its index concatenated. So streamed events always add up to
// the non-streamed answer.
func Parse(f Format, text string) (content string, calls []Call) {
	p := NewParser(f)
	var b strings.Builder
	collect := func(evs []Event) {
		for _, ev := range evs {
			switch {
			case ev.Name != "":
				calls = append(calls, Call{Name: ev.Name})
			case ev.Args != "":
				calls[ev.Index].Arguments += ev.Args
			default:
				b.WriteString(ev.Content)
			}
		}
	}
	collect(p.Push(text))
	collect(p.Finish())
	return b.String(), calls
}

// state is where the Parser is in the output.
type state uint8

const (
	stText     state = iota // content; matching the format's opening marker (held)
	stContent               // the rest is content
	stBetween               // after a call: whitespace and an opening marker held
	stOpen                  // after an opening marker: whitespace, then the call
	stObj                   // inside a call object (see objState)
	stClose                 // Hermes, after a call object: whitespace and </tool_call>
	stArrStart              // Mistral, after "[": whitespace, then "{"
	stArr                   // Mistral, after an element: whitespace, then "," or "]"
	stArrNext               // Mistral, after ",": whitespace, then "{"
	stName                  // Mistral [TOOL_CALLS]name[ARGS]: the name and [ARGS]
	stArgs                  // Mistral, after [ARGS]: whitespace, then the arguments value
	stArgsIn                // Mistral, inside the arguments value after [ARGS]
	stSep                   // Llama3, before a call: whitespace, ";", <|python_tag|>, then "{"
)

// objState is where the Parser is inside a call object.
type objState uint8

const (
	oKey     objState = iota // whitespace, then a key or "}"
	oKeyStr                  // inside a key string
	oColon                   // whitespace, then ":"
	oValue                   // whitespace, then a value
	oValueIn                 // inside a value
	oNext                    // whitespace, then "," or "}"
)

// valueKind is what the value being read is.
type valueKind uint8

const (
	vSkip valueKind = iota // another key's value, ignored
	vName                  // the "name" string
	vArgs                  // the "arguments" (or "parameters") value
)

// Parser reads a model's output as it is generated and splits it into
// [Event]s: content, and tool calls in format f. It is not safe for
// concurrent use.
//
// Content passes through as soon as it cannot be part of a call: only a
// possible start of a marker (a trailing "<tool_" or "[TOOL_") is held
// back. A call is announced (a Name event) as soon as its "name" string is
// complete, and its arguments follow as the model writes them: the Args
// of a call concatenate to the exact JSON text of its "arguments" value
// ("parameters" is accepted as well in every format; the first of the two
// counts), ending at the end of that value. Arguments written before the
// name are held until the name is complete. Other keys of the call object
// (an "id", say) are skipped. A call object without an arguments key gets
// Args "{}" when it closes. Whitespace inside the wrapper is free; JSON
// values are not checked beyond strings, escapes and bracket nesting.
//
// What counts as a call, per format:
//
//   - Hermes: <tool_call>, whitespace, a call object, whitespace,
//     </tool_call>. Text before, between and after blocks is content,
//     except whitespace between blocks or at the end of the output (and
//     a </tool_call> cut off by the end), which is dropped. Text after a
//     block keeps the whitespace before it.
//   - Llama3: only when the output starts (after whitespace) with { or
//     <|python_tag|>: then it is call objects, each optionally preceded by
//     <|python_tag|>, separated by whitespace and ";".
//     Separators at the end are dropped; anything else after a call is
//     content, from the separator on to the end of the output. An output
//     that starts otherwise is all content.
//   - Mistral: [TOOL_CALLS], whitespace, then a non-empty JSON array of
//     call objects (one index each), or a single call object, or
//     name[ARGS] followed by the arguments value. [TOOL_CALLS] may come
//     again for more calls. Text around the calls is content, as for
//     Hermes; whitespace after calls, and the ", " of an array cut off by
//     the end, is dropped.
//
// Malformed output never makes the Parser fail, and no text is lost: an
// output without calls comes back whole as Content. Until a call's Name has
// been sent, the text from the start of the would-be call (its marker, or
// the separator after the previous call) is held back; as soon as the
// text cannot be a call (not JSON where the call object should be, a call
// object that closes without a "name" string, an empty name, or the end
// of the output) it is sent as Content, and parsing goes on after it as
// plain text (for Llama3, everything after it is content). Once a Name has
// been sent the call stands: if the text stops fitting the format, the
// call ends with the arguments sent so far and the rest of the output is
// read from the first byte that does not fit as if no call were open
// (in practice it becomes content, wrapper text included). A call cut off
// by the end of the output keeps the arguments sent so far (the caller
// reports finish_reason "length").
//
// Content and Args fragments end on UTF-8 rune boundaries: a rune split
// across Push calls is held until it is complete (or until Finish).
type Parser struct {
	f       Format
	open    string // the opening marker (Hermes, Mistral)
	st      state
	obj     objState
	m       int  // bytes of the marker being matched
	inArray bool // Mistral: the current call object is an array element

	// held is the text that may still turn out not to be a call (or, after
	// a call, the separator that follows it); Finish or a failure sends it
	// as Content.
	held []byte

	inCall   bool // the current call's Name has been sent
	haveArgs bool // the current call object has an arguments value
	kind     valueKind
	key      []byte // the key being read, quotes and escapes included
	name     []byte // the name being read (JSON string literal, or Mistral's bare name)
	args     []byte // arguments read before the name
	sc       scanner
	nameSp   bool // Mistral bare name: whitespace after it seen

	calls int
	done  bool

	out  []Event
	tail Event // a fragment ending in an incomplete rune, held to the next Push
}

// NewParser returns a Parser for format f. An unknown format is read as
// Hermes, Detect's fallback.
func NewParser(f Format) *Parser {
	p := &Parser{f: f}
	switch f {
	case Llama3:
		p.st = stSep
	case Mistral:
		p.open = mistralOpen
	default:
		p.f = Hermes
		p.open = hermesOpen
	}
	return p
}

// Calls returns the number of calls seen so far (Name events sent).
func (p *Parser) Calls() int {
	return p.calls
}

// Push reads the next piece of generated text, split anywhere (even inside
// a marker or a UTF-8 rune), and returns the events it completes. The
// caller owns the returned slice. After Finish, Push returns text as
// Content.
func (p *Parser) Push(text string) []Event {
	p.out = nil
	if p.done {
		p.st = stContent
	}
	for i := 0; i < len(text); {
		i += p.step(text, i)
	}
	p.holdTail()
	return p.out
}

// Finish ends the output and returns the events for what was held back
// (see [Parser] for what becomes of an unfinished call).
func (p *Parser) Finish() []Event {
	p.out = nil
	if p.done {
		return nil
	}
	p.done = true
	switch p.st {
	case stText, stContent:
		p.flushHeld()
	case stClose:
		p.held = p.held[:0] // whitespace and part of </tool_call>: the wrapper of a finished call
	case stBetween, stArr, stArrNext, stSep:
		if p.calls > 0 && onlySeparators(p.held) {
			p.held = p.held[:0]
		}
		p.flushHeld()
	default:
		if !p.inCall {
			p.flushHeld()
		}
	}
	p.flushTail()
	return p.out
}

func onlySeparators(b []byte) bool {
	for _, c := range b {
		if !isSpace(c) && c != ';' && c != ',' {
			return false
		}
	}
	return true
}

// step reads text from i and returns how many bytes it consumed. It
// returns 0 only after changing state, so that the byte is read again in
// the new state.
func (p *Parser) step(text string, i int) int {
	c := text[i]
	switch p.st {
	case stContent:
		p.emitContent(text[i:])
		return len(text) - i

	case stText:
		if p.m == 0 {
			k := strings.IndexByte(text[i:], p.open[0])
			if k < 0 {
				p.emitContent(text[i:])
				return len(text) - i
			}
			if k > 0 {
				p.emitContent(text[i : i+k])
				return k
			}
		}
		if c == p.open[p.m] {
			p.matchByte(c, stOpen)
			return 1
		}
		p.flushHeld() // a partial marker that is content after all
		p.m = 0
		return 0

	case stBetween:
		if p.m == 0 && isSpace(c) {
			p.held = append(p.held, c)
			return 1
		}
		if c == p.open[p.m] {
			p.matchByte(c, stOpen)
			return 1
		}
		p.fail()
		return 0

	case stOpen:
		switch {
		case isSpace(c):
			p.held = append(p.held, c)
		case c == '{':
			p.held = append(p.held, c)
			p.inArray = false
			p.startObject()
		case p.f == Mistral && c == '[':
			p.held = append(p.held, c)
			p.st = stArrStart
		case p.f == Mistral && isNameByte(c):
			p.held = append(p.held, c)
			p.name = append(p.name[:0], c)
			p.nameSp = false
			p.st = stName
		default:
			p.fail()
			return 0
		}
		return 1

	case stObj:
		return p.stepObj(text, i)

	case stClose:
		if p.m == 0 && isSpace(c) {
			p.held = append(p.held, c)
			return 1
		}
		if c == hermesClose[p.m] {
			p.held = append(p.held, c)
			if p.m++; p.m == len(hermesClose) {
				p.m = 0
				p.held = p.held[:0]
				p.st = stBetween
			}
			return 1
		}
		p.fail()
		return 0

	case stArrStart, stArr, stArrNext:
		switch {
		case isSpace(c):
		case c == '{' && p.st != stArr:
			p.held = append(p.held, c)
			p.inArray = true
			p.startObject()
			return 1
		case c == ',' && p.st == stArr:
			p.st = stArrNext
		case c == ']' && p.st == stArr:
			p.held = p.held[:0]
			p.st = stBetween
			return 1
		default:
			p.fail()
			return 0
		}
		p.held = append(p.held, c)
		return 1

	case stName:
		if p.m > 0 || c == '[' {
			if c != mistralArgs[p.m] {
				p.fail()
				return 0
			}
			p.held = append(p.held, c)
			if p.m++; p.m == len(mistralArgs) {
				p.m = 0
				p.startCall(string(p.name))
				p.st = stArgs
			}
			return 1
		}
		switch {
		case isNameByte(c) && !p.nameSp:
			p.name = append(p.name, c)
		case isSpace(c):
			p.nameSp = true
		default:
			p.fail()
			return 0
		}
		p.held = append(p.held, c)
		return 1

	case stArgs:
		if isSpace(c) {
			return 1
		}
		if !p.sc.start(c) {
			p.fail()
			return 0
		}
		p.haveArgs = true
		p.st = stArgsIn
		return 0

	case stArgsIn:
		j, end := p.sc.scan(text, i)
		p.emitArgs(text[i:j])
		if end {
			p.endCall()
			p.st = stBetween
		}
		return j - i

	case stSep:
		if p.m > 0 || c == pythonTag[0] {
			if c != pythonTag[p.m] {
				p.fail()
				return 0
			}
			p.held = append(p.held, c)
			if p.m++; p.m == len(pythonTag) {
				p.m = 0
			}
			return 1
		}
		switch {
		case isSpace(c), c == ';' && p.calls > 0:
			p.held = append(p.held, c)
		case c == '{':
			p.held = append(p.held, c)
			p.startObject()
		default:
			p.fail()
			return 0
		}
		return 1
	}
	return 0
}

// matchByte holds c, the next byte of the opening marker, and moves to
// next when the marker is complete.
func (p *Parser) matchByte(c byte, next state) {
	p.held = append(p.held, c)
	if p.m++; p.m == len(p.open) {
		p.m = 0
		p.st = next
	}
}

// stepObj is step inside a call object.
func (p *Parser) stepObj(text string, i int) int {
	c := text[i]
	switch p.obj {
	case oKey, oNext:
		switch {
		case isSpace(c):
		case c == '"' && p.obj == oKey:
			p.key = append(p.key[:0], c)
			p.sc = scanner{str: true}
			p.obj = oKeyStr
		case c == ',' && p.obj == oNext:
			p.obj = oKey
		case c == '}':
			p.holdByte(c)
			p.endObject()
			return 1
		default:
			p.fail()
			return 0
		}
		p.holdByte(c)
		return 1

	case oKeyStr:
		j, end := p.sc.scan(text, i)
		p.key = append(p.key, text[i:j]...)
		p.holdStr(text[i:j])
		if end {
			p.kind = vSkip
			switch key, _ := decodeString(p.key); {
			case key == "name" && !p.inCall:
				p.kind = vName
			case (key == "arguments" || key == "parameters") && !p.haveArgs:
				p.kind = vArgs
			}
			p.obj = oColon
		}
		return j - i

	case oColon:
		switch {
		case isSpace(c):
		case c == ':':
			p.obj = oValue
		default:
			p.fail()
			return 0
		}
		p.holdByte(c)
		return 1

	case oValue:
		if isSpace(c) {
			p.holdByte(c)
			return 1
		}
		if !p.sc.start(c) || p.kind == vName && c != '"' {
			p.fail()
			return 0
		}
		switch p.kind {
		case vName:
			p.name = p.name[:0]
		case vArgs:
			p.haveArgs = true
			p.args = p.args[:0]
		}
		p.obj = oValueIn
		return 0

	case oValueIn:
		j, end := p.sc.scan(text, i)
		span := text[i:j]
		p.holdStr(span)
		switch p.kind {
		case vName:
			p.name = append(p.name, span...)
		case vArgs:
			if p.inCall {
				p.emitArgs(span)
			} else {
				p.args = append(p.args, span...)
			}
		}
		if end {
			p.obj = oNext
			if p.kind == vName {
				name, ok := decodeString(p.name)
				if !ok || name == "" {
					p.fail()
					return j - i
				}
				p.startCall(name)
				if p.haveArgs {
					p.emitArgs(string(p.args))
				}
			}
		}
		return j - i
	}
	return 0
}

// holdByte and holdStr keep text of a call object while its name is not
// known.
func (p *Parser) holdByte(c byte) {
	if !p.inCall {
		p.held = append(p.held, c)
	}
}

func (p *Parser) holdStr(s string) {
	if !p.inCall {
		p.held = append(p.held, s...)
	}
}

func (p *Parser) startObject() {
	p.st = stObj
	p.obj = oKey
	p.inCall = false
	p.haveArgs = false
}

// startCall sends the Name event of a new call. The held text was its
// wrapper: it is dropped.
func (p *Parser) startCall(name string) {
	p.inCall = true
	p.held = p.held[:0]
	p.emit(Event{Index: p.calls, Name: name})
	p.calls++
}

// endObject follows the "}" that closes a call object.
func (p *Parser) endObject() {
	if !p.inCall {
		p.fail()
		return
	}
	if !p.haveArgs {
		p.emitArgs("{}")
	}
	p.endCall()
	switch {
	case p.f == Hermes:
		p.st = stClose
	case p.f == Llama3:
		p.st = stSep
	case p.inArray:
		p.st = stArr
	default:
		p.st = stBetween
	}
}

func (p *Parser) endCall() {
	p.inCall = false
	p.haveArgs = false
	p.held = p.held[:0]
}

// fail gives up on the text held since the would-be call started: it is
// sent as Content, and the current byte is read again as plain text.
func (p *Parser) fail() {
	p.flushHeld()
	p.m = 0
	p.inCall = false
	p.haveArgs = false
	if p.f == Llama3 {
		p.st = stContent
	} else {
		p.st = stText
	}
}

func (p *Parser) flushHeld() {
	if len(p.held) > 0 {
		p.emitContent(string(p.held))
		p.held = p.held[:0]
	}
}

func (p *Parser) emitContent(s string) {
	if s != "" {
		p.emit(Event{Content: s})
	}
}

func (p *Parser) emitArgs(s string) {
	if s != "" {
		p.emit(Event{Index: p.calls - 1, Args: s})
	}
}

// emit appends ev, merging it into the last event when both are Content,
// or Args of the same call.
func (p *Parser) emit(ev Event) {
	p.flushTail()
	if n := len(p.out); n > 0 && ev.Name == "" {
		last := &p.out[n-1]
		switch {
		case ev.Content != "" && last.Content != "":
			last.Content += ev.Content
			return
		case ev.Args != "" && last.Args != "" && last.Index == ev.Index:
			last.Args += ev.Args
			return
		}
	}
	p.out = append(p.out, ev)
}

// holdTail moves an incomplete rune at the end of the last event into
// p.tail, for the next emit.
func (p *Parser) holdTail() {
	n := len(p.out)
	if n == 0 {
		return
	}
	last := &p.out[n-1]
	s := &last.Content
	if last.Args != "" {
		s = &last.Args
	}
	cut := incompleteTail(*s)
	if cut == 0 {
		return
	}
	p.tail = *last
	if last.Args != "" {
		p.tail.Args = (*s)[len(*s)-cut:]
	} else {
		p.tail.Content = (*s)[len(*s)-cut:]
	}
	*s = (*s)[:len(*s)-cut]
	if *s == "" {
		if p.out = p.out[:n-1]; n == 1 {
			p.out = nil
		}
	}
}

func (p *Parser) flushTail() {
	if p.tail.Content == "" && p.tail.Args == "" {
		return
	}
	t := p.tail
	p.tail = Event{}
	p.out = append(p.out, t)
}
