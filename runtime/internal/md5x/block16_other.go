//go:build !amd64 || purego

package md5x

var useLanes = false // no kernel here

func block16(s *[4][Lanes]uint32, p *[Lanes]*[64]byte) { panic("md5x: no kernel") }
