package raftfsm

import (
	"bytes"
	"sync"
	"unsafe"
	"weak"
)

// sharedPayloadMin is the size from which a decoded payload equal to the
// last one decoded shares its array (sharedPayload).
const sharedPayloadMin = 64 << 10

// lastPayload is the array of the last payload of at least
// sharedPayloadMin bytes decoded, held weakly: it keeps nothing alive.
var lastPayload struct {
	mu sync.Mutex
	p  weak.Pointer[byte] // its first byte
	n  int
}

// sharedPayload returns a copy of v, a payload of at least
// sharedPayloadMin bytes being decoded, or the array of the last such
// payload decoded when it still lives and holds the same bytes.
//
// The N shard tasks of a run carry their parent's payload, each in its
// own record: every Fire and every Complete decodes one, and the delivery
// of each fired shard holds its task until its callback, so a run of 1 024
// shards of 1 MB held up to a GB of identical copies at once (and
// allocated two per shard). Decoded this way they are one array. A
// payload is never written in place once decoded (a Task's payload is
// read, encoded and sent, never changed: a changed task gets a new
// slice), and the slice returned has no room to append into. It changes
// no stored byte: only where the decoded bytes live.
func sharedPayload(v []byte) []byte {
	lastPayload.mu.Lock()
	defer lastPayload.mu.Unlock()
	if lastPayload.n == len(v) {
		if p := lastPayload.p.Value(); p != nil {
			if s := unsafe.Slice(p, len(v)); bytes.Equal(s, v) {
				return s[:len(v):len(v)]
			}
		}
	}
	s := append(make([]byte, 0, len(v)), v...)
	lastPayload.p, lastPayload.n = weak.Make(&s[0]), len(s)
	return s
}

// payload reads a payload as bin does, sharing a large one's array with
// an equal one decoded before (sharedPayload).
func (r *reader) payload() []byte {
	v, ok := r.binRef()
	if !ok {
		return nil
	}
	if len(v) < sharedPayloadMin {
		return append(make([]byte, 0, len(v)), v...)
	}
	return sharedPayload(v)
}
