package python

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fila-mq/fila/gen/internal/spec"
)

func load(t *testing.T) *spec.Spec {
	t.Helper()
	s, err := spec.Load(filepath.Join("..", "..", "..", "spec", "protocol.toml"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEveryFrameAndCode: the generated modules hold a dataclass per frame
// and struct, an opcode per frame, and an exception class per code.
func TestEveryFrameAndCode(t *testing.T) {
	s := load(t)
	files, err := Files(s)
	if err != nil {
		t.Fatal(err)
	}
	wire, errs := string(files["_wire_gen.py"]), string(files["_errors_gen.py"])
	for _, f := range s.Frames {
		if !strings.Contains(wire, "\nclass "+className(f.Name)+":\n") {
			t.Errorf("_wire_gen.py: no class for frame %s", f.Name)
		}
		if !strings.Contains(wire, "    "+upperSnake(f.Name)+" = ") {
			t.Errorf("_wire_gen.py: no opcode for frame %s", f.Name)
		}
	}
	for _, st := range s.Structs {
		if !strings.Contains(wire, "\nclass "+st.Name+":\n") {
			t.Errorf("_wire_gen.py: no class for struct %s", st.Name)
		}
	}
	for _, c := range s.Codes {
		if c.Scope != spec.ScopeOK && !strings.Contains(errs, "\nclass "+camelOfSnake(c.Name)+"Error(FilaError):\n") {
			t.Errorf("_errors_gen.py: no exception class for %s", c.Name)
		}
	}
	for name, b := range files {
		if !strings.HasPrefix(string(b), Banner+"\n") {
			t.Errorf("%s does not start with the banner", name)
		}
	}
}

// TestNames: spec names become Python names.
func TestNames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{upperSnake("CreateApiKey"), "CREATE_API_KEY"},
		{upperSnake("DLQStats"), "DLQ_STATS"},
		{upperSnake("HandshakeOk"), "HANDSHAKE_OK"},
		{camelOfSnake("NOT_A_DLQ"), "NotADlq"},
		{camelOfSnake("QUEUE_NOT_FOUND"), "QueueNotFound"},
		{className("Error"), "ErrorFrame"},
		{attr("from"), "from_"},
		{attr("queue"), "queue"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q; want %q", tc.got, tc.want)
		}
	}
}

// TestShadowedBuiltin: a field named like a builtin type (QueueStatsResult's
// bytes) makes the class's annotations name the builtin through builtins.
func TestShadowedBuiltin(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "spec", "protocol.toml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := spec.Parse(append(b, "\n[[structs]]\nname = \"Blob\"\ndoc = \"A blob.\"\nfields = [\n  { name = \"bytes\", type = \"u64\", doc = \"Size.\" },\n  { name = \"data\", type = \"bytes\", doc = \"Data.\" },\n]\n"...))
	if err != nil {
		t.Fatal(err)
	}
	files, err := Files(s)
	if err != nil {
		t.Fatal(err)
	}
	wire := string(files["_wire_gen.py"])
	i := strings.Index(wire, "\nclass Blob:\n")
	if i < 0 {
		t.Fatal("no class Blob")
	}
	body := wire[i : i+strings.Index(wire[i+1:], "\n@dataclass")]
	if !strings.Contains(body, "    data: builtins.bytes = b\"\"") || !strings.Contains(body, "    bytes: int = 0") {
		t.Errorf("class Blob does not name builtins through builtins:\n%s", body)
	}
}
