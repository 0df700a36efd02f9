package ipc

import (
	"bytes"
	"encoding/json"
	"errors"
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
// It walks the body's bytes once (keyWalker), allocating only for keys
// that hold an escape, for objects of more than keySetSmall keys and for
// its per-depth key sets: it adds about 5 % to encoding/json's decoding
// of a batch and 20 % (0.7 µs, 10 allocations) to a single submit's
// (BenchmarkDecodeSubmitBatch and BenchmarkDecodeSubmit, json-labels,
// alternated runs; a walk with json.Decoder.Token doubled both). The fast
// paths (scanSubmit, scanSubmitBatch) give up on a duplicate themselves
// and come here only then.
func checkDuplicateKeys(body []byte) error {
	w := keyWalker{scanner: scanner{b: body}}
	w.ws()
	if w.p >= len(w.b) || w.b[w.p] != '{' {
		return nil // not an object: the decoder says so
	}
	if dup, ok := w.object(false).(*duplicateKeyError); ok && json.Valid(body) {
		return Errorf(ErrInvalidJSON, "%s", dup.message())
	}
	return nil
}

// CheckDuplicateKeys is checkDuplicateKeys for the JSON other parts of
// the node read from outside that the decoder would take with a key
// twice, keeping the last value: an executor's answer to the shard-count
// question ({"count":3,"count":4}: sidecar/delivery's ParseShardCount).
// It returns nil, or an ErrInvalidJSON whose message names the key
// (`invalid json: duplicate key "count"`). Keys are compared without
// regard to case, as for a body decoded into a struct.
func CheckDuplicateKeys(body []byte) error {
	return checkDuplicateKeys(body)
}

// dupKeysMaxDepth bounds the nesting checkDuplicateKeys walks: a request's
// own structure is at most 4 deep (a flow, its stages, a stage, its
// labels).
const dupKeysMaxDepth = 16

// keyWalker walks a JSON text with the batch scanner's steps (scanner:
// b[p] is the next byte). On bytes that are not JSON it stops with
// errNotJSON, and the decoder then says what is wrong.
type keyWalker struct {
	scanner
	// path leads to the value being walked (object keys and array
	// indexes), for messages.
	path []pathStep
	// seen[i] holds the keys so far of the object being walked at depth
	// i (depth objects are open); each serves the next object at its
	// depth too.
	seen  []keySet
	depth int
}

// keySet is the keys of one object so far. The first keySetSmall are
// compared one by one (bytes into the body: no allocation, and requests
// have few keys); past them a map takes over, as compared (foldKey for a
// struct's) to as sent.
type keySet struct {
	small [][]byte
	big   map[string]string
}

const keySetSmall = 16

// add records key (as sent; mapKeys: compared exactly, else without
// regard to case) and returns the earlier key it equals, if any.
func (s *keySet) add(key []byte, mapKeys bool) (first []byte, dup bool) {
	if s.big == nil {
		for _, k := range s.small {
			if mapKeys && bytes.Equal(k, key) || !mapKeys && bytes.EqualFold(k, key) {
				return k, true
			}
		}
		if len(s.small) < keySetSmall {
			s.small = append(s.small, key)
			return nil, false
		}
		s.big = make(map[string]string, 2*keySetSmall)
		for _, k := range s.small {
			s.big[s.id(k, mapKeys)] = string(k)
		}
	}
	id := s.id(key, mapKeys)
	if k, ok := s.big[id]; ok {
		return []byte(k), true
	}
	s.big[id] = string(key)
	return nil, false
}

func (s *keySet) id(key []byte, mapKeys bool) string {
	if mapKeys {
		return string(key)
	}
	return foldKey(string(key))
}

// reset empties s for the next object at its depth.
func (s *keySet) reset() {
	s.small, s.big = s.small[:0], nil
}

// errNotJSON stops a walk over bytes that are not JSON.
var errNotJSON = errors.New("not json")

type pathStep struct {
	key     []byte
	index   int // an array's
	isIndex bool
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
func opaqueKey(key []byte) bool {
	return bytes.EqualFold(key, []byte("payload")) || bytes.EqualFold(key, []byte("result"))
}

// value walks the next value (after white space); mapKeys: an object's
// keys are a map's; look: false skips the value without checking keys
// (the user's JSON, or nested past dupKeysMaxDepth).
func (w *keyWalker) value(mapKeys, look bool) error {
	w.ws()
	if w.p >= len(w.b) {
		return errNotJSON
	}
	switch c := w.b[w.p]; {
	case c == '{' && look && len(w.path) <= dupKeysMaxDepth:
		return w.object(mapKeys)
	case c == '[' && look && len(w.path) <= dupKeysMaxDepth:
		return w.array()
	case c == '{' || c == '[':
		return w.skipNested()
	}
	if _, ok := w.scanner.value(0); !ok { // a string, number, true, false or null
		return errNotJSON
	}
	return nil
}

// skipNested skips an object or array at b[p] without looking at its
// keys, at any depth (scanner.value stops at 200): strings are skipped
// as strings (a bracket inside one counts for nothing), brackets counted;
// the rest of the grammar is the decoder's to check.
func (w *scanner) skipNested() error {
	depth := 0
	for w.p < len(w.b) {
		switch w.b[w.p] {
		case '"':
			if !w.string() {
				return errNotJSON
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				w.p++
				return nil
			}
		}
		w.p++
	}
	return errNotJSON
}

// more ends a member of an object or array (close is '}' or ']'): it
// reports whether another member follows.
func (w *keyWalker) more(close byte) (bool, error) {
	w.ws()
	switch {
	case w.lit(","):
		return true, nil
	case w.p < len(w.b) && w.b[w.p] == close:
		w.p++
		return false, nil
	}
	return false, errNotJSON
}

// object walks the object at b[p] ('{').
func (w *keyWalker) object(mapKeys bool) error {
	w.p++ // '{'
	if w.depth == len(w.seen) {
		w.seen = append(w.seen, keySet{})
	}
	d := w.depth
	w.depth++
	defer func() {
		w.depth--
		w.seen[d].reset()
	}()
	if w.wsLit("}") {
		return nil
	}
	for more := true; more; {
		w.ws()
		start := w.p
		if !w.string() {
			return errNotJSON
		}
		key := w.b[start+1 : w.p-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			// The rare key with an escape is read as encoding/json reads it.
			var k string
			if json.Unmarshal(w.b[start:w.p], &k) != nil {
				return errNotJSON
			}
			key = []byte(k)
		}
		if first, dup := w.seen[d].add(key, mapKeys); dup {
			return &duplicateKeyError{key: string(key), first: string(first), where: w.where()}
		}
		if !w.wsLit(":") {
			return errNotJSON
		}
		w.path = append(w.path, pathStep{key: key})
		err := w.value(bytes.EqualFold(key, []byte("labels")), !opaqueKey(key))
		w.path = w.path[:len(w.path)-1]
		if err != nil {
			return err
		}
		if more, err = w.more('}'); err != nil {
			return err
		}
	}
	return nil
}

// array walks the array at b[p] ('[').
func (w *keyWalker) array() error {
	w.p++ // '['
	if w.wsLit("]") {
		return nil
	}
	for i, more := 0, true; more; i++ {
		w.path = append(w.path, pathStep{index: i, isIndex: true})
		err := w.value(false, true)
		w.path = w.path[:len(w.path)-1]
		if err != nil {
			return err
		}
		if more, err = w.more(']'); err != nil {
			return err
		}
	}
	return nil
}

// where names the value at w.path: tasks[0].labels.
func (w *keyWalker) where() string {
	var b strings.Builder
	for _, s := range w.path {
		switch {
		case s.isIndex:
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		case b.Len() > 0:
			b.WriteString("." + clipKey(string(s.key)))
		default:
			b.WriteString(clipKey(string(s.key)))
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
