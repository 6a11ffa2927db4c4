// Command asmgen generates the Go assembly of llmd's SIMD kernels with avo
// (github.com/mmcloughlin/avo). It is a module of its own, so that avo is no
// dependency of llmd; go generate runs it (see engine/cpu/asm_generate.go and
// engine/sample/asm_generate.go):
//
//	go generate ./engine/cpu/ ./engine/sample/
//
// Each flag names a file to write:
//
//	-kernels  engine/cpu/kernel_amd64.s         AVX2 matrix kernels (kernels_avx2.go, kquants_avx2.go)
//	-avx512   engine/cpu/kernel_avx512_amd64.s  AVX-512 matrix kernels (kernels_avx512.go, kquants_avx512.go)
//	-attn     engine/cpu/attn_amd64.s           attention and SwiGLU (attn.go)
//	-sample   engine/sample/simd_amd64.s        sampler passes (sample.go)
//
// The kernels use fixed physical registers, as the hand-written assembly they
// replace did: every instruction, its operands and their order are those of
// that assembly, so the machine code is the same. The Go declarations live in
// the stub files next to each .s file.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/mmcloughlin/avo/attr"
	"github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/gotypes"
	"github.com/mmcloughlin/avo/ir"
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/pass"
	"github.com/mmcloughlin/avo/printer"
	"github.com/mmcloughlin/avo/reg"
)

// output is one generated file: its flag, where go generate writes it
// (relative to this directory) and the function that builds it.
type output struct {
	flag, path, usage string
	gen               func(*asm)
}

var outputs = []output{
	{"kernels", "../../engine/cpu/kernel_amd64.s", "AVX2 matrix kernels", genKernelsAVX2},
	{"avx512", "../../engine/cpu/kernel_avx512_amd64.s", "AVX-512 matrix kernels", genKernelsAVX512},
	{"attn", "../../engine/cpu/attn_amd64.s", "attention and SwiGLU kernels", genAttn},
	{"sample", "../../engine/sample/simd_amd64.s", "sampler kernels", genSample},
}

func main() {
	files := make([]*string, len(outputs))
	for i, o := range outputs {
		files[i] = flag.String(o.flag, "", "write the "+o.usage+" (go generate: "+o.path+") to `file`")
	}
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "asmgen: unexpected arguments:", flag.Args())
		os.Exit(2)
	}
	n := 0
	for i, o := range outputs {
		if *files[i] == "" {
			continue
		}
		n++
		if err := write(o, *files[i]); err != nil {
			fmt.Fprintf(os.Stderr, "asmgen: %s: %v\n", *files[i], err)
			os.Exit(1)
		}
	}
	if n == 0 {
		fmt.Fprintln(os.Stderr, "asmgen: no output selected")
		flag.Usage()
		os.Exit(2)
	}
}

// write builds o and writes it to path. The header names the command that
// go generate runs from the repository root, whatever path is, so that a
// copy generated elsewhere (scripts/check-asm.sh) is byte for byte the same.
func write(o output, path string) error {
	a := &asm{build.NewContext()}
	a.ConstraintExpr("amd64,!purego")
	o.gen(a)
	f, err := a.Result()
	if err != nil {
		return err
	}
	if err := pass.Compile.Execute(f); err != nil {
		return err
	}
	cfg := printer.Config{Argv: []string{"go", "-C", "internal/asmgen", "run", ".", "-" + o.flag, o.path}}
	b, err := printer.NewGoAsm(cfg).Print(f)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// asm is avo's build context with the helpers the kernels share.
type asm struct {
	*build.Context
}

// text starts the NOSPLIT function name with the Go signature sig and a
// frame of frame bytes.
func (a *asm) text(name string, frame int, sig string) {
	a.Function(name)
	a.Attributes(attr.NOSPLIT)
	a.SignatureExpr(sig)
	if frame > 0 {
		a.AllocLocal(frame)
	}
}

// arg is the address of the argument of the active function that Go
// assembly calls name: "w_base", "xd_len", "scale".
func (a *asm) arg(name string) operand.Mem {
	base, part, _ := strings.Cut(name, "_")
	comp := a.Param(base)
	switch part {
	case "base":
		comp = comp.Base()
	case "len":
		comp = comp.Len()
	case "":
	default:
		panic("asmgen: bad argument name " + name)
	}
	return resolve(name, comp)
}

// ret is the address of the active function's result name, or of its only
// result ("ret") if name is "".
func (a *asm) ret(name string) operand.Mem {
	if name == "" {
		return resolve("ret", a.ReturnIndex(0))
	}
	return resolve(name, a.Return(name))
}

func resolve(name string, c gotypes.Component) operand.Mem {
	b, err := c.Resolve()
	if err != nil {
		panic(fmt.Sprintf("asmgen: argument %s: %v", name, err))
	}
	return b.Addr
}

// data declares the read-only static table name of 8-byte words.
func (a *asm) data(name string, words ...uint64) operand.Mem { return table(a, name, words) }

// data32 is data with 4-byte words.
func (a *asm) data32(name string, words ...uint32) operand.Mem { return table(a, name, words) }

// table declares the read-only static table name of the words.
func table[W uint32 | uint64](a *asm, name string, words []W) operand.Mem {
	m := a.StaticGlobal(name)
	a.DataAttributes(attr.RODATA | attr.NOPTR)
	for i, w := range words {
		switch w := any(w).(type) {
		case uint32:
			a.AddDatum(4*i, operand.U32(w))
		case uint64:
			a.AddDatum(8*i, operand.U64(w))
		}
	}
	return m
}

// rep4 is four copies of the 8-byte word w: a 32-byte table of it.
func rep4(w uint64) []uint64 { return []uint64{w, w, w, w} }

// VPDPBUSD emits the AVX-512 VNNI instruction, which avo v0.5.0's
// instruction database lacks: an ir.Instruction built by hand with the
// operand forms of Go's assembler (xmm/ymm/zmm or memory, then two
// registers of the same width), which avo prints like any other.
func (a *asm) VPDPBUSD(src, mid, dst operand.Op) { a.vnni("VPDPBUSD", src, mid, dst) }

// vnni emits the AVX-512 VNNI instruction op with VPDPBUSD's operands.
func (a *asm) vnni(op string, src, mid, dst operand.Op) {
	v, ok := dst.(reg.Register)
	if !ok || v.Kind() != reg.KindVector {
		panic("asmgen: " + op + ": destination must be a vector register")
	}
	if m, ok := mid.(reg.Register); !ok || m.Kind() != reg.KindVector || m.Size() != v.Size() {
		panic("asmgen: " + op + ": second operand must be a vector register of the destination's width")
	}
	switch s := src.(type) {
	case operand.Mem:
	case reg.Register:
		if s.Kind() != reg.KindVector || s.Size() != v.Size() {
			panic("asmgen: " + op + ": first operand must be memory or a vector register of the destination's width")
		}
	default:
		panic("asmgen: " + op + ": bad first operand")
	}
	isa := []string{"AVX512VNNI"}
	if v.Size() < 64 {
		isa = append(isa, "AVX512VL")
	}
	a.Instruction(&ir.Instruction{
		Opcode:   op,
		Operands: []operand.Op{src, mid, dst},
		Inputs:   []operand.Op{src, mid, dst},
		Outputs:  []operand.Op{dst},
		ISA:      isa,
	})
}

// vpdpbusdBcst is VPDPBUSD with its signed operand a 32-bit value at m
// broadcast to every lane ({1to16}; the .BCST suffix), mid and dst zmm
// registers.
func (a *asm) vpdpbusdBcst(m operand.Mem, mid, dst reg.Register) {
	a.Instruction(&ir.Instruction{
		Opcode:   "VPDPBUSD",
		Suffixes: []string{"BCST"},
		Operands: []operand.Op{m, mid, dst},
		Inputs:   []operand.Op{m, mid, dst},
		Outputs:  []operand.Op{dst},
		ISA:      []string{"AVX512VNNI"},
	})
}

// Memory operands.

// mem is disp(base).
func mem(base reg.Register, disp int) operand.Mem {
	return operand.Mem{Base: base, Disp: disp}
}

// memx is disp(base)(idx*scale).
func memx(base reg.Register, disp int, idx reg.Register, scale uint8) operand.Mem {
	return operand.Mem{Base: base, Disp: disp, Index: idx, Scale: scale}
}

// sp is disp(SP), a local of the frame.
func sp(disp int) operand.Mem { return mem(reg.StackPointer, disp) }

// sym is the address of off bytes into the Go symbol name of the package
// (·name+off(SB)).
func sym(name string, off int) operand.Mem {
	return operand.Mem{Symbol: operand.Symbol{Name: "\u00b7" + name}, Base: reg.StaticBase, Disp: off}
}

// lbl is a reference to the label name.
func lbl(name string) operand.LabelRef { return operand.LabelRef(name) }
