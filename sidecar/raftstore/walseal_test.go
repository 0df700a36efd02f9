package raftstore

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
)

// sealTailFile leaves the WAL in dir as a process killed in the middle of
// raft-wal's rotation does: the tail segment's file sealed (its index
// frame written, as the append that fills a segment writes it), the
// metadata still saying it is open.
func sealTailFile(t *testing.T, dir string) {
	t.Helper()
	var meta metadb.BoltMetaDB
	ps, err := meta.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tail := ps.Segments[len(ps.Segments)-1]
	meta.Close()
	if !tail.SealTime.IsZero() {
		t.Fatal("the tail is sealed in the metadata already")
	}
	sw, err := segment.NewFiler(dir, walfs.New()).RecoverTail(tail)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sw.ForceSeal(); err != nil {
		t.Fatal(err)
	}
	sw.Close()
}

// A tail segment sealed on disk but not rotated (the process was killed
// between the two) refused every append for good after a restart
// ("segment is sealed"): openWAL now rotates it, and the log keeps every
// entry.
func TestWALSealedTailRotatedAtOpen(t *testing.T) {
	dir := t.TempDir()
	w, err := openWAL(dir, testHlog, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := testEntries(1, 10)
	if err := w.StoreLogs(want); err != nil {
		t.Fatal(err)
	}
	w.Close()
	sealTailFile(t, dir)

	// What raft-wal alone does with it.
	plain, err := wal.Open(dir, wal.WithSegmentSize(walSegmentSize), wal.WithLogger(testHlog))
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.StoreLogs(testEntries(11, 1)); !errors.Is(err, wal.ErrSealed) {
		t.Fatalf("raft-wal appended to a sealed tail: %v (the test does not reproduce the state)", err)
	}
	plain.Close()

	if sealed, err := walTailSealed(dir); err != nil || !sealed {
		t.Fatalf("walTailSealed = %v, %v", sealed, err)
	}
	w, err = openWAL(dir, testHlog, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.StoreLogs(testEntries(11, 2)); err != nil {
		t.Fatalf("append after the open: %v", err)
	}
	want = append(want, testEntries(11, 2)...)
	check := func(w *wal.WAL) {
		t.Helper()
		if first, _ := w.FirstIndex(); first != 1 {
			t.Fatalf("first index %d", first)
		}
		if last, _ := w.LastIndex(); last != 12 {
			t.Fatalf("last index %d", last)
		}
		for _, e := range want {
			var got raft.Log
			if err := w.GetLog(e.Index, &got); err != nil {
				t.Fatalf("entry %d: %v", e.Index, err)
			}
			if got.Term != e.Term || got.Type != e.Type || !bytes.Equal(got.Data, e.Data) {
				t.Fatalf("entry %d: term %d %q, want term %d %q", e.Index, got.Term, got.Data, e.Term, e.Data)
			}
		}
	}
	check(w)
	w.Close()
	if sealed, err := walTailSealed(dir); err != nil || sealed {
		t.Fatalf("after the rotation walTailSealed = %v, %v", sealed, err)
	}
	w, err = openWAL(dir, testHlog, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	check(w)
}

// A new dir and a WAL whose tail is open are left as they are.
func TestWALTailNotSealed(t *testing.T) {
	dir := t.TempDir()
	if sealed, err := walTailSealed(dir); err != nil || sealed {
		t.Fatalf("empty dir: %v, %v", sealed, err)
	}
	w, err := openWAL(dir, testHlog, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.StoreLogs(testEntries(1, 3)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if sealed, err := walTailSealed(dir); err != nil || sealed {
		t.Fatalf("open tail: %v, %v", sealed, err)
	}
}
