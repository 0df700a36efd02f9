package raftfsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
	"github.com/klauspost/compress/s2"
)

// Snapshot stream format: the 8-byte magic "axsnap02", the applied index
// (uint64 big-endian), then the records compressed as one S2 stream
// (github.com/klauspost/compress/s2, stream format, CRC per block): each
// key/value as uvarint(len key) key uvarint(len value) value, then a
// zero-length key as the end mark. An "axsnap01" stream (ax before
// 2026-12-05) has the same records uncompressed; restore reads both.
//
// The records compress about ten times (the task records of one handler
// are much alike): a snapshot of 370 000 waiting tasks took 76 MB as
// axsnap01 and 7.9 MB as axsnap02, and writing the bytes (the write
// system calls and raft's CRC-64 of the file) cost more CPU than the S2
// compression of them (docs/perf/README.md, branch snap).
var (
	snapMagic   = []byte("axsnap02")
	snapMagicV1 = []byte("axsnap01")
)

// StateSizeSink is a snapshot sink that wants the size of the state it
// stores: the bytes of the records before compression. Persist reports it
// (SetStateBytes) before it closes such a sink. raftstore's snapshot store
// triggers the next snapshot by it, since a snapshot's cost follows the
// state it reads rather than the compressed bytes it writes.
type StateSizeSink interface {
	SetStateBytes(n uint64)
}

type snapshot struct {
	txn     *badger.Txn // read view pinned at Snapshot time
	applied uint64
	// counts are the tasks per handler at applied (HandlerCounts), written
	// into the stream as keySavedCounts' record, so that a restore need
	// not decode every task record to count them (savedcounts.go).
	counts map[string][numStates]int64
}

// Persist streams the pinned read view into sink.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	raw, err := s.write(sink)
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	if ss, ok := sink.(StateSizeSink); ok {
		ss.SetStateBytes(raw)
	}
	return sink.Close()
}

// write writes the snapshot stream to w and returns the bytes of its
// records before compression.
func (s *snapshot) write(w io.Writer) (uint64, error) {
	var hdr [16]byte
	copy(hdr[:8], snapMagic)
	binary.BigEndian.PutUint64(hdr[8:], s.applied)
	if _, err := w.Write(hdr[:]); err != nil {
		return 0, err
	}
	// One compressing goroutine: the snapshot is background work next to
	// the node's applies and deliveries on few cores; S2's default of one
	// per core would take them all at once.
	// On an error the writer is dropped unclosed: Persist cancels the sink.
	zw := s2.NewWriter(w, s2.WriterConcurrency(1))
	bw := bufio.NewWriterSize(zw, 64<<10)
	cw := countWriter{w: bw}
	if err := s.writeRecords(&cw, hdr[8:]); err != nil {
		return cw.n, err
	}
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	return cw.n, zw.Close()
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w *bufio.Writer
	n uint64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += uint64(n)
	return n, err
}

// writeRecords writes every key and value of the read view as records,
// then the end mark; applied is the 8-byte applied index the view must
// hold.
func (s *snapshot) writeRecords(w io.Writer, applied []byte) error {
	// No value prefetch: the values sit in the tables next to their keys
	// (below badger's value threshold), and each is written straight from
	// its block into w; prefetching copied every value once more, on
	// goroutines started per 100 keys.
	opts := badger.DefaultIteratorOptions
	opts.PrefetchValues = false
	it := s.txn.NewIterator(opts)
	defer it.Close()
	var lenBuf [binary.MaxVarintLen64]byte
	sawApplied := s.applied == 0
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		k := item.Key()
		if len(k) == 0 || string(k) == string(keySavedCounts) {
			continue // the counts are written below, at the view's index
		}
		err := item.Value(func(v []byte) error {
			if string(k) == string(keyApplied) {
				sawApplied = string(v) == string(applied)
			}
			return writeRecord(w, &lenBuf, k, v)
		})
		if err != nil {
			return err
		}
	}
	// The view must hold the applied index it was pinned at. It does not
	// when a Restore dropped the data between Snapshot and Persist (badger
	// pins versions, not files): the stream would be empty, not the state.
	if !sawApplied {
		return errors.New("snapshot read view lost its state (the FSM was restored after Snapshot)")
	}
	if s.counts != nil {
		v, err := encodeSavedCounts(s.applied, s.counts)
		if err != nil {
			return err
		}
		if v != nil { // nil: too many handlers, the restore counts the tasks
			if err := writeRecord(w, &lenBuf, keySavedCounts, v); err != nil {
				return err
			}
		}
	}
	_, err := w.Write(lenBuf[:binary.PutUvarint(lenBuf[:], 0)])
	return err
}

// writeRecord writes key k and value v as a record of the stream; buf is
// scratch for the lengths. It returns the error of v's write (w buffers,
// and a buffered writer's error sticks).
func writeRecord(w io.Writer, buf *[binary.MaxVarintLen64]byte, k, v []byte) error {
	w.Write(buf[:binary.PutUvarint(buf[:], uint64(len(k)))])
	w.Write(k)
	w.Write(buf[:binary.PutUvarint(buf[:], uint64(len(v)))])
	_, err := w.Write(v)
	return err
}

// Release ends the pinned read view.
func (s *snapshot) Release() { s.txn.Discard() }

// restore drops every key and loads the stream; it returns the applied index
// stored in the stream's data. dropped reports whether the old state was
// dropped, so that an error leaves badger with neither state.
//
// The applied-index key is written last, after every other key is in
// badger: a restore that fails part way must not leave an applied index that
// claims state badger does not hold, or a restart would skip the entries it
// came from.
func restore(db *badger.DB, r io.Reader) (idx uint64, dropped bool, err error) {
	magic := make([]byte, len(snapMagic))
	if _, err := io.ReadFull(r, magic); err != nil || (string(magic) != string(snapMagic) && string(magic) != string(snapMagicV1)) {
		return 0, false, fmt.Errorf("not an ax snapshot: %w", ErrBadEntry)
	}
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, false, fmt.Errorf("snapshot header: %w", err)
	}
	var br *bufio.Reader
	if string(magic) == string(snapMagic) {
		// S2 checks each block's CRC and refuses a block longer than its
		// maximum (4 MiB) before allocating it.
		br = bufio.NewReaderSize(s2.NewReader(r), 64<<10)
	} else {
		br = bufio.NewReaderSize(r, 64<<10)
	}
	if err := db.DropAll(); err != nil {
		return 0, true, err
	}
	wb := db.NewWriteBatch()
	defer wb.Cancel()
	var applied []byte
	for {
		kl, err := binary.ReadUvarint(br)
		if err != nil {
			return 0, true, fmt.Errorf("snapshot truncated: %w", err)
		}
		if kl == 0 {
			break
		}
		k, err := readField(br, kl)
		if err != nil {
			return 0, true, fmt.Errorf("snapshot truncated: %w", err)
		}
		vl, err := binary.ReadUvarint(br)
		if err != nil {
			return 0, true, fmt.Errorf("snapshot truncated: %w", err)
		}
		v, err := readField(br, vl)
		if err != nil {
			return 0, true, fmt.Errorf("snapshot truncated: %w", err)
		}
		if string(k) == string(keyApplied) {
			applied = v
			continue
		}
		if string(k) == string(keySavedCounts) && len(v) > savedCountsMaxBytes {
			continue // more than badger may take as one value: the tasks are counted
		}
		if err := wb.Set(k, v); err != nil {
			return 0, true, err
		}
	}
	if err := wb.Flush(); err != nil {
		return 0, true, err
	}
	switch len(applied) {
	case 0:
	case 8:
		idx = binary.BigEndian.Uint64(applied)
	default:
		return 0, true, fmt.Errorf("applied index of %d bytes: %w", len(applied), ErrBadEntry)
	}
	if want := binary.BigEndian.Uint64(hdr[:]); idx != want {
		return 0, true, errors.New("snapshot applied index does not match its header")
	}
	if applied != nil {
		if err := db.Update(func(txn *badger.Txn) error { return txn.Set(keyApplied, applied) }); err != nil {
			return 0, true, err
		}
	}
	return idx, true, nil
}

// readField reads an n-byte field of the stream. It allocates as the bytes
// arrive rather than from the length prefix, so a corrupt length fails as a
// truncated stream instead of as an allocation of that size (a panic, or an
// out-of-memory crash).
func readField(r io.Reader, n uint64) ([]byte, error) {
	if n <= 64<<10 {
		b := make([]byte, n)
		_, err := io.ReadFull(r, b)
		return b, err
	}
	if n > math.MaxInt64 {
		return nil, fmt.Errorf("field of %d bytes: %w", n, ErrBadEntry)
	}
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, r, int64(n)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
