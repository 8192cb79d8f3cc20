package config

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to Load as fila.toml. Load must not panic;
// when it accepts the file, what Print writes must load back to the same
// configuration.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(fullFile))
	f.Add([]byte("[server]\nlisten_addr = \"[::1]:0\"\n"))
	f.Add([]byte("[queue]\nvisibility_timeout = 30\n"))
	f.Add([]byte("server = {listen_addr = \"a:1\"}\n"))
	f.Add([]byte("[[server]]\nlisten_addr = \"a:1\"\n"))
	f.Add([]byte("[cluster]\nnode_id = 1\npeers = [\"1@a:1\", \"2@b:2\"]\n"))
	f.Add([]byte("[auth]\nbootstrap_apikey = \"\\u0000\\\"0123456789abcdef\"\n"))
	hostname := func() (string, error) { return "fuzz", nil }
	f.Fuzz(func(t *testing.T, data []byte) {
		// load is Load without the file system, so that the fuzzer runs
		// (and minimizes) fast.
		c, src, err := load(FileName, data, nil, nil, hostname)
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := c.Print(&out, src); err != nil {
			t.Fatal(err)
		}
		printed := out.String()
		if c.Auth.BootstrapAPIKey != "" {
			printed = strings.Replace(printed, `"<redacted>"`, quote(string(c.Auth.BootstrapAPIKey)), 1)
		}
		back, _, err := load(FileName, []byte(printed), nil, nil, hostname)
		if err != nil {
			t.Fatalf("Load(Print(c)) error = %v\nprinted:\n%s", err, printed)
		}
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("Load(Print(c)) = %+v; want %+v", back, c)
		}
	})
}
