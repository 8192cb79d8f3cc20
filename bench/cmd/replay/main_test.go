package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCheckPass(t *testing.T) {
	for _, tc := range []struct {
		args []string
		bad  string
	}{
		{[]string{"--speedup", "600", "--limit=2000", "--throttle-rate", "a=1"}, ""},
		{[]string{"--speedup", "600", "--mode", "drr"}, "--mode"},
		{[]string{"--mode=drr"}, "--mode"},
		{[]string{"--report-dir", "x"}, "--report-dir"},
		{[]string{"--strict"}, "--strict"},
		{[]string{"-o", "json"}, "-o"},
		{[]string{"--merge=a.json"}, "--merge"},
	} {
		err := checkPass(tc.args)
		if tc.bad == "" && err != nil || tc.bad != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.bad+" after --")) {
			t.Errorf("checkPass(%q) = %v; want %q refused", tc.args, err, tc.bad)
		}
	}
}

// TestGuardWithoutGit checks a directory that git cannot tell about:
// report files that exist are refused unless forced.
func TestGuardWithoutGit(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if _, err := gitTracked([]string{"x"}); err == nil {
		t.Skip("the temporary directory is inside a git work tree")
	}
	out := filepath.Join(dir, "report")
	if err := guard(out, false); err != nil {
		t.Errorf("guard(a new directory) = %v; want nil", err)
	}
	os.MkdirAll(out, 0o755)
	os.WriteFile(filepath.Join(out, "replay.json"), []byte("{}"), 0o644)
	if err := guard(out, false); err == nil || !strings.Contains(err.Error(), "replay.json exists") {
		t.Errorf("guard(a directory with replay.json) = %v; want it refused", err)
	}
	if err := guard(out, true); err != nil {
		t.Errorf("guard(…, force) = %v; want nil", err)
	}
}

// TestGuardWithGit checks a directory in a git work tree: report files
// git tracks are refused unless forced; untracked ones are not.
func TestGuardWithGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	repo := t.TempDir()
	t.Chdir(repo)
	git := func(args ...string) {
		t.Helper()
		if b, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, b)
		}
	}
	git("init", "-q")
	for _, d := range []string{"results/replay", "results/scratch"} {
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "replay.md"), []byte("# replay\n"), 0o644)
	}
	git("add", "results/replay/replay.md")
	if err := guard("results/replay", false); err == nil || !strings.Contains(err.Error(), "git tracks results/replay/replay.md") {
		t.Errorf("guard(tracked) = %v; want it refused", err)
	}
	if err := guard("results/replay", true); err != nil {
		t.Errorf("guard(tracked, force) = %v; want nil", err)
	}
	if err := guard("results/scratch", false); err != nil {
		t.Errorf("guard(untracked files) = %v; want nil", err)
	}
	if err := guard("results/replay-20260101T000000Z", false); err != nil {
		t.Errorf("guard(a new directory) = %v; want nil", err)
	}
}

func TestParseModes(t *testing.T) {
	if got, err := parseModes("stfq, fifo"); err != nil || !slices.Equal(got, []string{"stfq", "fifo"}) {
		t.Errorf("parseModes(stfq, fifo) = %v, %v; want [stfq fifo]", got, err)
	}
	for _, in := range []string{"", "lifo", "drr,drr", "drr,,stfq"} {
		if _, err := parseModes(in); err == nil {
			t.Errorf("parseModes(%q): no error", in)
		}
	}
}
