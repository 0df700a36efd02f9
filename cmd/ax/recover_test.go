package main

import (
	"strings"
	"testing"
)

// ax cluster recover needs both flags, and refuses a data dir without Raft
// state (nothing written).
func TestClusterRecover_Refuses(t *testing.T) {
	_, errOut, code := runAx(t, "cluster", "recover", "--node-id", "n1")
	if code != exitUsage || !strings.Contains(errOut, "--data-dir and --node-id are required") {
		t.Errorf("without --data-dir: %d %q", code, errOut)
	}
	dir := t.TempDir()
	_, errOut, code = runAx(t, "cluster", "recover", "--data-dir", dir, "--node-id", "n1", "--yes")
	if code == 0 || !strings.Contains(errOut, "no raft state in the data dir") {
		t.Errorf("an empty data dir: %d %q", code, errOut)
	}
	if _, _, code := runAx(t, "cluster", "--help"); code != 0 {
		t.Errorf("help: %d", code)
	}
}
