package raftstore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// incarnationFile holds the random id of a data dir (Store.Incarnation).
const incarnationFile = "incarnation"

// loadIncarnation returns the incarnation of data dir dir: the content of
// dir/incarnation, made (16 random bytes, hex) and synced when the file is
// missing. A data dir that is lost takes its incarnation with it, so a
// node that comes back empty under its old id has a new one.
func loadIncarnation(dir string) (string, error) {
	path := filepath.Join(dir, incarnationFile)
	b, err := os.ReadFile(path)
	if err == nil {
		if s := strings.TrimSpace(string(b)); s != "" {
			return s, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	inc := hex.EncodeToString(r[:])
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.WriteString(inc + "\n"); err != nil {
		f.Close()
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return inc, f.Close()
}
