//go:build !race

package filatest

const raceBuild = false
