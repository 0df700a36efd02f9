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
)

// Snapshot stream format: the 8-byte magic "axsnap01", the applied index
// (uint64 big-endian), then each key/value as uvarint(len key) key
// uvarint(len value) value, then a zero-length key as the end mark.
var snapMagic = []byte("axsnap01")

type snapshot struct {
	txn     *badger.Txn // read view pinned at Snapshot time
	applied uint64
}

// Persist streams the pinned read view into sink.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.write(sink); err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *snapshot) write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(snapMagic)
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], s.applied)
	bw.Write(hdr[:])
	// No value prefetch: the values sit in the tables next to their keys
	// (below badger's value threshold), and each is written straight from
	// its block into bw; prefetching copied every value once more, on
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
		if len(k) == 0 {
			continue
		}
		err := item.Value(func(v []byte) error {
			if string(k) == string(keyApplied) {
				sawApplied = string(v) == string(hdr[:])
			}
			bw.Write(lenBuf[:binary.PutUvarint(lenBuf[:], uint64(len(k)))])
			bw.Write(k)
			bw.Write(lenBuf[:binary.PutUvarint(lenBuf[:], uint64(len(v)))])
			_, err := bw.Write(v)
			return err
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
	bw.Write(lenBuf[:binary.PutUvarint(lenBuf[:], 0)])
	return bw.Flush()
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
	br := bufio.NewReaderSize(r, 64<<10)
	magic := make([]byte, len(snapMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != string(snapMagic) {
		return 0, false, fmt.Errorf("not an ax snapshot: %w", ErrBadEntry)
	}
	var hdr [8]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return 0, false, fmt.Errorf("snapshot header: %w", err)
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
