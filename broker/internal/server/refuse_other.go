//go:build !unix

package server

import "net"

// writeNow reports false: on this platform a refused socket is answered
// on a goroutine of its own.
func writeNow(nc net.Conn, b []byte) bool { return false }
