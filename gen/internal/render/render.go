// Package render produces every generated file of the repository from
// spec/protocol.toml, and writes or checks them.
package render

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/dave/jennifer/jen"

	"github.com/fila-mq/fila/gen/internal/docs"
	"github.com/fila-mq/fila/gen/internal/golang"
	"github.com/fila-mq/fila/gen/internal/python"
	"github.com/fila-mq/fila/gen/internal/spec"
	"github.com/fila-mq/fila/gen/internal/typescript"
)

// SpecPath is the spec's path relative to the repository root.
const SpecPath = "spec/protocol.toml"

// ProtocolDoc is the generated protocol document, relative to the root.
const ProtocolDoc = "docs/protocol.md"

// All loads the spec under root and renders every generated file, keyed by
// path relative to root. docs/protocol.md's prose is read from root.
func All(root string) (map[string][]byte, error) {
	s, err := spec.Load(filepath.Join(root, SpecPath))
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	add := func(dir string, files map[string]*jen.File) error {
		for name, f := range files {
			var buf bytes.Buffer
			if err := f.Render(&buf); err != nil {
				return fmt.Errorf("gen: render %s/%s: %w", dir, name, err)
			}
			out[filepath.ToSlash(filepath.Join(dir, name))] = buf.Bytes()
		}
		return nil
	}
	wire, err := golang.Wire(s)
	if err != nil {
		return nil, err
	}
	if err := add("sdk/core/wire", wire); err != nil {
		return nil, err
	}
	if err := add("broker/internal/fault", golang.Fault(s)); err != nil {
		return nil, err
	}
	if err := add("broker/internal/server", golang.Broker(s)); err != nil {
		return nil, err
	}
	if err := add("sdk/go", golang.SDK(s)); err != nil {
		return nil, err
	}
	ts, err := typescript.Files(s)
	if err != nil {
		return nil, err
	}
	for name, b := range ts {
		out[typescript.Dir+"/"+name] = b
	}
	py, err := python.Files(s)
	if err != nil {
		return nil, err
	}
	for name, b := range py {
		out[python.Dir+"/"+name] = b
	}
	old, err := os.ReadFile(filepath.Join(root, ProtocolDoc))
	if err != nil {
		return nil, fmt.Errorf("gen: read prose: %w", err)
	}
	md, err := docs.Render(s, string(old))
	if err != nil {
		return nil, err
	}
	out[ProtocolDoc] = []byte(md)
	return out, nil
}

// Write writes files under root, creating directories as needed.
func Write(root string, files map[string][]byte) error {
	for _, name := range sorted(files) {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("gen: %w", err)
		}
		if err := os.WriteFile(path, files[name], 0o644); err != nil {
			return fmt.Errorf("gen: %w", err)
		}
	}
	return nil
}

// Stale returns the files under root whose content differs from files, or
// that are missing.
func Stale(root string, files map[string][]byte) ([]string, error) {
	var stale []string
	for _, name := range sorted(files) {
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("gen: %w", err)
		}
		if !bytes.Equal(got, files[name]) {
			stale = append(stale, name)
		}
	}
	return stale, nil
}

func sorted(files map[string][]byte) []string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
