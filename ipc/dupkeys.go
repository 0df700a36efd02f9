package ipc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// checkDuplicateKeys refuses, with ErrInvalidJSON, a body in which one
// JSON object has the same key twice: encoding/json keeps the last value
// and drops the others without a word ({"tasks":[A],"tasks":[B]} stored B
// alone, and the answer was 200). decodeStrict calls it before decoding.
//
// The keys of an object decoded into a struct are compared the way
// encoding/json matches a key to a field, without regard to case
// (strings.EqualFold is its rule: foldName in encoding/json/fold.go), so
// "tasks" and "Tasks" are the same key; those of an object decoded into a
// map (labels) exactly, as the map takes them ("k" and "K" are two
// labels). Keys are compared once unescaped ("h\u0061ndler" is "handler").
//
// It does not look into the values the API keeps byte for byte as the
// user's JSON: a task's payload (of a submit, a batch item, a flow stage)
// and an attempt's result. These rules go by the key's name at any depth
// rather than by the field's place in each request: in a body the decoder
// accepts, a key named payload, result or labels is that field or else a
// label's key, whose value is a string (nothing to look into); anywhere
// else it is an unknown field, refused all the same.
//
// A body that is not a JSON object, or not valid JSON, passes (even after
// a duplicate): the decoder then says what is wrong with it. Nesting
// deeper than any request's own (dupKeysMaxDepth) is not looked into:
// only an unknown field can hold it.
//
// It walks the body with json.Decoder.Token, which takes longer than the
// decoding itself (BenchmarkDecodeSubmit/json-labels: 3.3 µs before the
// walk, 8.6 with it); the fast paths (scanSubmit, scanSubmitBatch) give
// up on a duplicate themselves and come here only then.
func checkDuplicateKeys(body []byte) error {
	w := keyWalker{dec: json.NewDecoder(bytes.NewReader(body))}
	w.dec.UseNumber() // numbers stay text: no range error here
	if tok, err := w.dec.Token(); err != nil || tok != json.Delim('{') {
		return nil // not an object: the decoder says so
	}
	if dup, ok := w.object(false).(*duplicateKeyError); ok && json.Valid(body) {
		return Errorf(ErrInvalidJSON, "%s", dup.message())
	}
	return nil
}

// dupKeysMaxDepth bounds the nesting checkDuplicateKeys walks: a request's
// own structure is at most 4 deep (a flow, its stages, a stage, its
// labels).
const dupKeysMaxDepth = 16

// keyWalker walks a JSON object with dec.Token.
type keyWalker struct {
	dec *json.Decoder
	// path leads to the value being walked (object keys and array
	// indexes), for messages.
	path []pathStep
	// seen[i] holds the keys so far of the object being walked at depth
	// i (depth objects are open), as compared (foldKey for a struct's)
	// to as sent; each map serves the next object at its depth too.
	seen  []map[string]string
	depth int
	// skip takes the values not looked into.
	skip json.RawMessage
}

type pathStep struct {
	key   string
	index int // an array's, when key is ""
}

// duplicateKeyError is the duplicate the walk found.
type duplicateKeyError struct {
	key, first string // the second key as sent, and the first
	where      string // the object's path, "" for the body itself
}

func (e *duplicateKeyError) Error() string { return e.message() }

// message is the ErrInvalidJSON message, in decodeError's style.
func (e *duplicateKeyError) message() string {
	msg := fmt.Sprintf("invalid json: duplicate key %q", clipKey(e.key))
	if e.where != "" {
		msg += " in " + e.where
	}
	if e.first != e.key {
		msg += fmt.Sprintf(", the same field as %q (field names match without regard to case)", clipKey(e.first))
	}
	return msg
}

// opaqueKey reports whether the value of key is the user's JSON, kept byte
// for byte (see checkDuplicateKeys).
func opaqueKey(key string) bool {
	return strings.EqualFold(key, "payload") || strings.EqualFold(key, "result")
}

// value walks the next value; mapKeys: an object's keys are a map's.
func (w *keyWalker) value(mapKeys bool) error {
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

func (w *keyWalker) object(mapKeys bool) error {
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
		if first, ok := seen[id]; ok {
			return &duplicateKeyError{key: key, first: first, where: w.where()}
		}
		seen[id] = key
		w.path = append(w.path, pathStep{key: key})
		if opaqueKey(key) {
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

func (w *keyWalker) array() error {
	for i := 0; w.dec.More(); i++ {
		w.path = append(w.path, pathStep{index: i})
		err := w.value(false)
		w.path = w.path[:len(w.path)-1]
		if err != nil {
			return err
		}
	}
	_, err := w.dec.Token() // ']'
	return err
}

// where names the value at w.path: tasks[0].labels.
func (w *keyWalker) where() string {
	var b strings.Builder
	for _, s := range w.path {
		switch {
		case s.key == "":
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		case b.Len() > 0:
			b.WriteString("." + clipKey(s.key))
		default:
			b.WriteString(clipKey(s.key))
		}
	}
	return b.String()
}

// clipKey shortens a key quoted in a message.
func clipKey(k string) string {
	if len(k) > 80 {
		return k[:80] + "…"
	}
	return k
}

// foldKey spells k so that foldKey(a) == foldKey(b) exactly when
// strings.EqualFold(a, b): each rune becomes the smallest of its
// unicode.SimpleFold orbit (as encoding/json's foldName does), and then an
// ASCII capital its small letter, so that keys in small letters, the usual
// ones, come back as they are, without a copy.
func foldKey(k string) string {
	i := 0
	for i < len(k) && k[i] < utf8.RuneSelf && (k[i] < 'A' || k[i] > 'Z') {
		i++
	}
	if i == len(k) {
		return k
	}
	b := make([]byte, i, len(k))
	copy(b, k)
	for _, r := range k[i:] {
		f := r
		for g := unicode.SimpleFold(r); g != r; g = unicode.SimpleFold(g) {
			f = min(f, g)
		}
		if 'A' <= f && f <= 'Z' {
			f += 'a' - 'A'
		}
		b = utf8.AppendRune(b, f)
	}
	return string(b)
}
