package raftstore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// writeRaftDB makes a raft.db with n entries of size bytes each and then
// deletes all but the last keep (as log compaction after a snapshot does),
// leaving most of the file free pages.
func writeRaftDB(t *testing.T, path string, n, size, keep uint64) {
	t.Helper()
	st, err := raftboltdb.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= n; i += 16 {
		var ls []*raft.Log
		for j := i; j < i+16 && j <= n; j++ {
			data := make([]byte, size)
			data[0] = byte(j)
			ls = append(ls, &raft.Log{Index: j, Term: 1, Type: raft.LogCommand, Data: data})
		}
		if err := st.StoreLogs(ls); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if keep < n {
		if err := st.DeleteRange(1, n-keep); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

func fileSize(t *testing.T, p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// A raft.db that is mostly free pages is compacted at start: it shrinks to
// less than half and still opens with its entries and stable values.
func TestCompactRaftDB(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	writeRaftDB(t, path, 2000, 16<<10, 100)
	before := fileSize(t, path)
	plenty := func() (DiskFree, error) { return DiskFree{Bytes: 1 << 40, Inodes: -1}, nil }
	res, err := compactRaftDB(path, 1<<20, plenty, testReserve)
	if err != nil || !res.compacted {
		t.Fatalf("compactRaftDB: %+v, %v", res, err)
	}
	after := fileSize(t, path)
	if res.before != before || res.after != after || after*2 >= before {
		t.Fatalf("raft.db %d -> %d bytes (result %+v): not below half", before, after, res)
	}
	t.Logf("raft.db %d KiB -> %d KiB", before>>10, after>>10)
	st, err := raftboltdb.NewBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	first, _ := st.FirstIndex()
	last, _ := st.LastIndex()
	if first != 1901 || last != 2000 {
		t.Fatalf("after compaction the log holds %d..%d, want 1901..2000", first, last)
	}
	var l raft.Log
	if err := st.GetLog(1950, &l); err != nil || len(l.Data) != 16<<10 || l.Data[0] != byte(1950%256) {
		t.Fatalf("entry 1950 after compaction: %v (%d bytes)", err, len(l.Data))
	}
	if term, err := st.GetUint64([]byte("CurrentTerm")); err != nil || term != 7 {
		t.Fatalf("CurrentTerm after compaction: %d, %v", term, err)
	}
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Fatalf("temp file left: %v", err)
	}
}

// It is left alone when small, mostly used, or when free space does not
// cover the copy plus the reserve.
func TestCompactRaftDBSkips(t *testing.T) {
	dir := t.TempDir()
	plenty := func() (DiskFree, error) { return DiskFree{Bytes: 1 << 40, Inodes: -1}, nil }
	used := filepath.Join(dir, "used.db")
	writeRaftDB(t, used, 500, 16<<10, 500)
	if res, err := compactRaftDB(used, 1<<20, plenty, testReserve); err != nil || res.compacted || res.skip != "mostly used" {
		t.Fatalf("mostly used: %+v, %v", res, err)
	}
	if res, err := compactRaftDB(used, 1<<40, plenty, testReserve); err != nil || res.compacted || res.skip != "small" {
		t.Fatalf("small: %+v, %v", res, err)
	}
	free := filepath.Join(dir, "free.db")
	writeRaftDB(t, free, 2000, 16<<10, 100)
	before := fileSize(t, free)
	short := func() (DiskFree, error) { return DiskFree{Bytes: testReserve, Inodes: -1}, nil }
	if res, err := compactRaftDB(free, 1<<20, short, testReserve); err != nil || res.compacted || res.skip == "" {
		t.Fatalf("no room for the copy: %+v, %v", res, err)
	}
	if fileSize(t, free) != before {
		t.Fatal("raft.db changed although compaction was skipped")
	}
	if res, err := compactRaftDB(filepath.Join(dir, "none.db"), 1, plenty, testReserve); err != nil || res.compacted {
		t.Fatalf("missing file: %+v, %v", res, err)
	}
}
