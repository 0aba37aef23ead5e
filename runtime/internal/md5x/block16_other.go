//go:build !amd64 || purego

package md5x

var useLanes = false // no kernel here

func block16(s *[4][lanes]uint32, p *[lanes]*[64]byte) { panic("md5x: no kernel") }
