//go:build unix

package server

import (
	"net"
	"syscall"
)

// writeNow makes one non-blocking write of b to nc and reports whether it
// could try (nc is a socket): the accept loop never waits on a refused
// socket, and a frame the socket does not take at once is not worth
// sending.
func writeNow(nc net.Conn, b []byte) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	rc.Write(func(fd uintptr) bool {
		syscall.Write(int(fd), b)
		return true
	})
	return true
}
