package sample

// simd_amd64.s is generated with avo by internal/asmgen, a module of its
// own; scripts/check-asm.sh (make lint) checks that it is current.
//go:generate go -C ../../internal/asmgen run . -sample ../../engine/sample/simd_amd64.s
