//go:build amd64 && !purego

package cpu

import xcpu "golang.org/x/sys/cpu"

// kernCPUID executes CPUID with the given leaf and sub-leaf.
//
//go:noescape
func kernCPUID(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// kernDetect picks the kernel level from the CPU's features. x/sys/cpu
// already checks that the OS saves the YMM and ZMM registers; F16C, which
// every AVX2 CPU has but x/sys/cpu does not report, is read from CPUID.
func kernDetect() kernLevel {
	_, _, ecx, _ := kernCPUID(1, 0)
	f16c := ecx&(1<<29) != 0
	if !xcpu.X86.HasAVX2 || !xcpu.X86.HasFMA || !f16c {
		return kernLevelGo
	}
	x := xcpu.X86
	// DQ: swigluAVX512 uses VANDPS in the EVEX
	// encoding.
	if x.HasAVX512F && x.HasAVX512BW && x.HasAVX512DQ && x.HasAVX512VL && x.HasAVX512VNNI {
		return kernLevelAVX512
	}
	return kernLevelAVX2
}
