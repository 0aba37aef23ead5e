//go:build amd64 && !purego

package md5x

import "golang.org/x/sys/cpu"

// useLanes: the kernel's instructions (AVX-512F, its ZMM registers saved
// by the OS) are there.
var useLanes = cpu.X86.HasAVX512F

// block16 runs one block of each of 16 lanes: s[w][l] is word w of lane
// l's state, p[l] lane l's block.
//
//go:noescape
func block16(s *[4][Lanes]uint32, p *[Lanes]*[64]byte)
