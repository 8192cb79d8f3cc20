package config

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestFlagsOverrideEverything sets three keys in the file, the
// environment and by flags, and checks that the flags win, that Sources
// names them, and that a key no flag sets keeps its lower layer.
func TestFlagsOverrideEverything(t *testing.T) {
	opts := setup(t, "[server]\nlisten_addr = \"127.0.0.1:6001\"\n[storage]\ndata_dir = \"/file/data\"\n[log]\nlevel = \"warn\"\n",
		env{"FILA_SERVER_LISTEN_ADDR": "127.0.0.1:6002", "FILA_STORAGE_DATA_DIR": "/env/data", "FILA_HTTP_LISTEN_ADDR": "127.0.0.1:9000"})
	opts.Flags = []FlagValue{
		{Key: "server.listen_addr", Value: "127.0.0.1:6003", Flag: "--listen"},
		{Key: "storage.data_dir", Value: "/flag/data", Flag: "--data-dir"},
		{Key: "http.listen_addr", Value: "", Flag: "--http"},
	}
	c, src := mustLoad(t, opts)
	path := filepath.Join(opts.Dir, FileName)
	for _, tt := range []struct {
		key, got, want string
		src            Source
	}{
		{"server.listen_addr", c.Server.ListenAddr, "127.0.0.1:6003", Source{FromFlag, "--listen"}},
		{"storage.data_dir", c.Storage.DataDir, "/flag/data", Source{FromFlag, "--data-dir"}},
		// An empty flag value is a value: it turns the listener off.
		{"http.listen_addr", c.HTTP.ListenAddr, "", Source{FromFlag, "--http"}},
		{"log.level", c.Log.Level.String(), "WARN", Source{FromFile, path}},
	} {
		if tt.got != tt.want || src.Of(tt.key) != tt.src {
			t.Errorf("%s = %q from %v; want %q from %v", tt.key, tt.got, src.Of(tt.key), tt.want, tt.src)
		}
	}
	if got := src.Of("server.listen_addr").String(); got != "flag --listen" {
		t.Errorf("Source.String() = %q; want %q", got, "flag --listen")
	}

	var out bytes.Buffer
	if err := c.Print(&out, src); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`listen_addr = "127.0.0.1:6003"`,
		"# flag --listen\n",
		`data_dir = "/flag/data"`,
		"# flag --data-dir\n",
		"# Read from " + path + ", the environment and flags; each value names its source.\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("Print() =\n%s\nwant it to contain %q", out.String(), want)
		}
	}
}

// TestFlagDerivedDefaults checks that defaults derived from a key follow
// the flag's value: a cluster node's advertised address is its client
// listener's.
func TestFlagDerivedDefaults(t *testing.T) {
	opts := setup(t, "", env{
		"FILA_CLUSTER_NODE_ID":          "1",
		"FILA_CLUSTER_PEERS":            "1@127.0.0.1:7001",
		"FILA_CLUSTER_PEER_LISTEN_ADDR": "127.0.0.1:7001",
	})
	opts.Flags = []FlagValue{{Key: "server.listen_addr", Value: "127.0.0.1:7000", Flag: "--listen"}}
	c, src := mustLoad(t, opts)
	if c.Cluster.AdvertiseAddr != "127.0.0.1:7000" || src.Of("cluster.advertise_addr") != (Source{FromDefault, "server.listen_addr"}) {
		t.Errorf("cluster.advertise_addr = %q from %v; want the --listen address, by default", c.Cluster.AdvertiseAddr, src.Of("cluster.advertise_addr"))
	}
}

// TestFlagErrors checks that a bad flag value is reported like a bad
// variable, naming the flag, and that a secret given by a flag is not
// shown.
func TestFlagErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		flag FlagValue
		want string
	}{
		{"bad address", FlagValue{Key: "server.listen_addr", Value: "nohost", Flag: "--listen"},
			`config: server.listen_addr = "nohost" (flag --listen): want `},
		{"bad duration", FlagValue{Key: "queue.visibility_timeout", Value: "soon", Flag: "--visibility-timeout"},
			`config: queue.visibility_timeout = "soon" (flag --visibility-timeout): want `},
		{"empty data directory", FlagValue{Key: "storage.data_dir", Value: "", Flag: "--data-dir"},
			`config: storage.data_dir = "" (flag --data-dir): want `},
		{"unknown key", FlagValue{Key: "server.listen", Value: "x", Flag: "--listen"},
			`config: unknown key server.listen = "x" (flag --listen): want `},
		{"short secret", FlagValue{Key: "auth.bootstrap_apikey", Value: "s3cr3t", Flag: "--bootstrap"},
			`config: auth.bootstrap_apikey = "<redacted>" (flag --bootstrap): want `},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := setup(t, "", nil)
			opts.Flags = []FlagValue{tt.flag}
			_, _, err := Load(opts)
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Source != (Source{FromFlag, tt.flag.Flag}) {
				t.Fatalf("Load() error = %v; want a *KeyError from the flag", err)
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("Load() error = %v; want it to start %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("Load() error = %v; shows the secret", err)
			}
		})
	}
}
