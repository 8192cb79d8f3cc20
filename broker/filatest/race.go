//go:build race

package filatest

// raceBuild is true when the test binary is built with -race: the
// fila-server that Binary builds is then race-built too, so end-to-end tests
// run under the race detector on both sides.
const raceBuild = true
