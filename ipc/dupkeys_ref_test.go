package ipc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCheckDuplicateKeysMatchesTokenWalk: checkDuplicateKeys walks the
// body's bytes itself; on any input it finds a duplicate exactly when a
// walk of the same rules with encoding/json's Decoder.Token does
// (refDuplicateKey, the first version, kept here as the reference), and
// names the same key.
func FuzzCheckDuplicateKeysMatchesTokenWalk(f *testing.F) {
	for _, s := range []string{
		`{"tasks":[{"id":"a","handler":"h"}],"tasks":[]}`,
		`{"tasks":[{"handler":"h"},{"id":"b","handler":"a","handler":"b"}]}`,
		`{"handler":"h","labels":{"k":"1","K":"2","k":"3"}}`,
		`{"handler":"h","payload":{"a":1,"a":2},"result":[{"b":1,"b":2}]}`,
		`{"handler":"a","h\u0061ndler":"b"}`,
		`{"handler":"h","route_key":"a","route_\u212aey":"b"}`,
		`{"a":{"b":[1,2,{"c":"}\"]","c":2}]}}`,
		`{"x":` + strings.Repeat(`{"a":`, 20) + `{"b":1,"b":2}` + strings.Repeat(`}`, 20) + `}`,
		`{"":1,"":2}`,
		`{"a":1,"a"`,
		`{"a" : 1 , "b" : [ ] , "c" : { } , "a" : null }`,
		`[{"a":1,"a":2}]`,
		`{"Payload":{"x":1,"x":2},"labels":{"payload":"1","payload":"2"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) {
			// The decoder reads each byte that is not UTF-8 as U+FFFD, so
			// the token walk names such a key otherwise ("ro\x8fte" is
			// "ro\ufffdte" to it) and takes "k\x8f" and "k\x90" for one
			// key; checkDuplicateKeys compares them as sent. Such a body
			// is refused all the same: as not UTF-8 (checkUTF8), or as a
			// duplicate when a key comes twice as sent. Walked all the
			// same: it must not panic or hang.
			checkDuplicateKeys(body)
			return
		}
		want, wantDup := refDuplicateKey(body)
		err := checkDuplicateKeys(body)
		if (err != nil) != wantDup {
			t.Fatalf("%q: checkDuplicateKeys %v, the token walk: duplicate %v %q", body, err, wantDup, want)
		}
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("duplicate key %q", clipKey(want))) {
			t.Fatalf("%q: %v, the token walk names %q", body, err, want)
		}
	})
}

func refDuplicateKey(body []byte) (string, bool) {
	w := tokWalker{dec: json.NewDecoder(bytes.NewReader(body))}
	w.dec.UseNumber() // numbers stay text: no range error here
	if tok, err := w.dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false
	}
	if dup, ok := w.object(false).(*tokDup); ok && json.Valid(body) {
		return dup.key, true
	}
	return "", false
}

// tokWalker is the reference walk: json.Decoder.Token.
type tokWalker struct {
	dec *json.Decoder
	// path leads to the value being walked (object keys and array
	// indexes), for messages.
	path []string
	// seen[i] holds the keys so far of the object being walked at depth
	// i (depth objects are open), as compared (foldKey for a struct's)
	// to as sent; each map serves the next object at its depth too.
	seen  []map[string]string
	depth int
	// skip takes the values not looked into.
	skip json.RawMessage
}

// value walks the next value; mapKeys: an object's keys are a map's.
func (w *tokWalker) value(mapKeys bool) error {
	if len(w.path) > dupKeysMaxDepth {
		return w.dec.Decode(&w.skip)
	}
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		return w.object(mapKeys)
	case json.Delim('['):
		return w.array()
	}
	return nil // a string, number, true, false or null
}

func (w *tokWalker) object(mapKeys bool) error {
	if w.depth == len(w.seen) {
		w.seen = append(w.seen, map[string]string{})
	}
	seen := w.seen[w.depth]
	w.depth++
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string) // an object's key is a string
		id := key
		if !mapKeys {
			id = foldKey(key)
		}
		if _, ok := seen[id]; ok {
			return &tokDup{key: key}
		}
		seen[id] = key
		w.path = append(w.path, key)
		if strings.EqualFold(key, "payload") || strings.EqualFold(key, "result") {
			err = w.dec.Decode(&w.skip)
		} else {
			err = w.value(strings.EqualFold(key, "labels"))
		}
		w.path = w.path[:len(w.path)-1]
		if err != nil {
			return err
		}
	}
	w.depth--
	if len(seen) > 64 {
		w.seen[w.depth] = map[string]string{} // clearing a map costs its size
	} else {
		clear(seen)
	}
	_, err := w.dec.Token() // '}'
	return err
}

func (w *tokWalker) array() error {
	for i := 0; w.dec.More(); i++ {
		w.path = append(w.path, "")
		err := w.value(false)
		w.path = w.path[:len(w.path)-1]
		if err != nil {
			return err
		}
	}
	_, err := w.dec.Token() // ']'
	return err
}

type tokDup struct{ key string }

func (e *tokDup) Error() string { return "duplicate " + e.key }
