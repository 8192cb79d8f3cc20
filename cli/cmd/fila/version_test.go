package main

import (
	"fmt"
	"testing"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/sdk/core/wire"
	fila "github.com/fila-mq/fila/sdk/go"
)

// TestVersion runs fila version with no broker at its address: it needs
// none.
func TestVersion(t *testing.T) {
	c := &cli{t: t, addr: filatest.FreePorts(t, 1)[0]} // nothing listens there

	want := fmt.Sprintf("fila %s\nprotocol %d (oldest supported: %d)\n", fila.Version, wire.ProtocolVersion, wire.MinProtocolVersion)
	if out := c.ok("version"); out != want {
		t.Errorf("fila version printed %q; want %q", out, want)
	}

	var v struct {
		Version            string `json:"version"`
		ProtocolVersion    int    `json:"protocol_version"`
		MinProtocolVersion int    `json:"min_protocol_version"`
	}
	c.json(&v, "version")
	if v.Version != fila.Version || v.ProtocolVersion != wire.ProtocolVersion || v.MinProtocolVersion != wire.MinProtocolVersion {
		t.Errorf("fila version -o json = %+v; want version %s, protocol %d, oldest %d",
			v, fila.Version, wire.ProtocolVersion, wire.MinProtocolVersion)
	}

	c.fails(2, "accepts 0 arg", "version", "extra")
}
