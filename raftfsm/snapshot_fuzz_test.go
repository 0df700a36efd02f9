package raftfsm

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"
)

// FuzzRestore feeds arbitrary streams to FSM.Restore, the reader of a
// snapshot that a leader (or a rogue peer) sends with InstallSnapshot. The
// property: Restore never panics or hangs; after any stream, good or bad,
// the FSM's reads do not panic; and a good snapshot restored afterwards
// gives back exactly its state (a bad stream leaves nothing behind).
// Seeds: testdata/fuzz/FuzzRestore and the streams below.
func FuzzRestore(f *testing.F) {
	src := newEnv(f)
	fillState(src)
	good := persist(f, src.snapshot())
	goodDump := src.dump()

	f.Add(good)
	f.Add(plainStream(f, good)) // the uncompressed axsnap01 form
	f.Add([]byte{})
	f.Add(snapMagic)
	f.Add(good[:len(snapMagic)+8])
	f.Add(good[:len(good)/2])
	// A stream whose first key claims 2^62 bytes, in both forms.
	huge := append(append([]byte{}, snapMagicV1...), good[len(snapMagic):len(snapMagic)+8]...)
	huge = binary.AppendUvarint(huge, 1<<62)
	f.Add(huge)
	f.Add(packStream(f, huge))
	// A header that does not match the applied index in the data.
	bad := bytes.Clone(good)
	bad[len(snapMagic)+7] ^= 1
	f.Add(bad)
	// One record with a task key and garbage for a value, then the end.
	var rec []byte
	rec = append(rec, snapMagicV1...)
	rec = append(rec, make([]byte, 8)...)
	k := taskKey("x")
	rec = binary.AppendUvarint(rec, uint64(len(k)))
	rec = append(rec, k...)
	rec = binary.AppendUvarint(rec, 3)
	rec = append(rec, 0xff, 0x00, 0x01)
	rec = binary.AppendUvarint(rec, 0)
	f.Add(rec)
	f.Add(packStream(f, rec))

	dst := newEnv(f)
	f.Fuzz(func(t *testing.T, stream []byte) {
		dst.t = t // env's helpers report to the running input
		err := dst.restore(stream)
		// Reads must not panic, whatever the stream held (their errors
		// are fine: corrupt records are reported, not trusted).
		_, _ = dst.f.Task("x")
		_, _ = dst.f.Nodes()
		_, _, _, _ = dst.f.List("", 0, "", 50)
		_ = dst.f.Running(func(*Task) bool { return true })
		_ = dst.f.Due(1<<62, func(string, int64) bool { return true })
		_, _ = dst.f.Expired(1<<62, time.Hour, time.Hour, 50, nil)
		_, _, _ = dst.f.Finished(FinishedQuery{BeforeMs: 1 << 62}, 50, nil)
		_ = dst.f.HandlerCounts()
		_, _ = dst.f.PausedHandlers()
		if err == nil {
			// What restored persists again.
			snap, serr := dst.f.Snapshot()
			if serr != nil {
				t.Fatalf("snapshot after a successful restore: %v", serr)
			}
			persist(t, snap)
		}
		// A good snapshot afterwards restores exactly.
		if err := dst.restore(good); err != nil {
			t.Fatalf("restore of the good snapshot after %d bytes: %v", len(stream), err)
		}
		if d := diffDumps(dst.dump(), goodDump); d != "" {
			t.Fatalf("the good snapshot restored after another stream differs:\n%s", d)
		}
	})
}
