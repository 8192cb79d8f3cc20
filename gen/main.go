// Command gen generates the protocol's code and documentation from
// spec/protocol.toml:
//
//	sdk/core/wire/frames_gen.go, codes_gen.go, codec_gen.go, codec_gen_test.go
//	broker/internal/fault/errors_gen.go
//	broker/internal/server/codes_gen.go, codes_gen_test.go
//	sdk/go/errors_gen.go, errors_gen_test.go
//	clients/python/src/fila/_wire_gen.py, _errors_gen.py
//	clients/typescript/src/wire_gen.ts, errors_gen.ts
//	docs/protocol.md (keeping its hand-written prose sections)
//
// Usage, from the repository root:
//
//	go run ./gen            write the files
//	go run ./gen -check     exit 1 and name every file that differs
//	go run ./gen -out DIR   write under DIR instead (for tests)
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/fila-mq/fila/gen/internal/render"
)

func main() {
	root := flag.String("root", ".", "repository root: where spec/ is read and, unless -out is set, files are written")
	out := flag.String("out", "", "write the generated files under this directory instead of -root")
	check := flag.Bool("check", false, "compare instead of writing; exit 1 if any file is stale")
	flag.Parse()

	files, err := render.All(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dest := *root
	if *out != "" {
		dest = *out
	}
	if *check {
		stale, err := render.Stale(dest, files)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for _, name := range stale {
			fmt.Fprintf(os.Stderr, "gen: %s is stale; run make gen\n", name)
		}
		if len(stale) > 0 {
			os.Exit(1)
		}
		return
	}
	if err := render.Write(dest, files); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
