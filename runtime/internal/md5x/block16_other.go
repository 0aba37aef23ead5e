//go:build !amd64 || purego

package md5x

var useLanes = false // no kernel here

func block16(s *[4][lanes]uint32, x *[16][lanes]uint32) { panic("md5x: no kernel") }
