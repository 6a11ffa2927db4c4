package cpu

// kernel_amd64.s, kernel_avx512_amd64.s and attn_amd64.s are generated with
// avo by internal/asmgen, a module of its own; scripts/check-asm.sh (make
// lint) checks that they are current.
//go:generate go -C ../../internal/asmgen run . -kernels ../../engine/cpu/kernel_amd64.s -avx512 ../../engine/cpu/kernel_avx512_amd64.s -attn ../../engine/cpu/attn_amd64.s
