package ipc

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
)

// unknownFieldPrefix starts encoding/json's error for an unknown field
// (DisallowUnknownFields): `json: unknown field "x"`, which says which key
// but not in which object.
const unknownFieldPrefix = "json: unknown field "

// unknownFieldError is the ErrInvalid for encoding/json's unknown-field
// error err, met decoding body into v: the key's object is named before
// it when it is not the body itself (`backoff: unknown field "x"`,
// `shards: unknown field "x"`), as a field of the wrong type is
// (`backoff.initial: must be …`); a key of the body itself stays
// `unknown field "x"`. ok is false for another error.
func unknownFieldError(err error, body []byte, v any) (e *Error, ok bool) {
	quoted, ok := strings.CutPrefix(err.Error(), unknownFieldPrefix)
	if !ok {
		return nil, false
	}
	msg := "unknown field " + quoted
	if key, uerr := strconv.Unquote(quoted); uerr == nil {
		if where := unknownFieldPath(body, reflect.TypeOf(v), key); where != "" {
			msg = where + ": " + msg
		}
	}
	return Errorf(ErrInvalid, "%s", msg), true
}

// unknownFieldPath names the object of body holding the unknown field key
// that the decoder refused decoding body into a value of type t: its path
// from the body (backoff, shards, a.b[2].c), "" for the body itself or
// when it cannot tell.
//
// The decoder keeps the first unknown field it meets in document order
// (and refuses nothing else first, or it would have said that), looking
// into the objects it decodes into structs and not into the values it
// hands to an UnmarshalJSON (labels, id, handler) or keeps raw (payload,
// a batch's tasks, a flow's stages: decoded on their own, and their
// caller prefixes the item, tasks[1]: or stages[0]:). unknownFieldPath
// walks body the same way, matching keys to t's fields as the decoder
// does (JSON names, embedded structs' fields promoted, the shallowest
// winning, without regard to case), and stops at the first key no field
// takes. If that key is not key, the walk and the decoder disagree and
// it answers "". It runs only on that error, so it is not made fast.
func unknownFieldPath(body []byte, t reflect.Type, key string) string {
	f := fieldFinder{scanner: scanner{b: body}}
	if path, found, err := f.value(t); err == nil && found && f.key == key {
		return path
	}
	return ""
}

// fieldFinder walks a JSON text for unknownFieldPath.
type fieldFinder struct {
	scanner
	path []string // steps to the value being walked: ".name", "[i]"
	key  string   // the unknown key found
}

var jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// value walks the value at b[p] (after white space) as decoded into t;
// found: it holds the first unknown field, path names its object.
func (f *fieldFinder) value(t reflect.Type) (path string, found bool, err error) {
	f.ws()
	if f.p >= len(f.b) {
		return "", false, errNotJSON
	}
	for t != nil && t.Kind() == reflect.Pointer && !t.Implements(jsonUnmarshalerType) {
		t = t.Elem()
	}
	custom := t == nil || t.Implements(jsonUnmarshalerType) || reflect.PointerTo(t).Implements(jsonUnmarshalerType)
	switch c := f.b[f.p]; {
	case c == '{' && !custom && t.Kind() == reflect.Struct:
		return f.object(t)
	case c == '{' && !custom && t.Kind() == reflect.Map:
		return f.members(t.Elem())
	case c == '[' && !custom && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		return f.elements(t.Elem())
	case c == '{' || c == '[':
		return "", false, f.skipNested() // not looked into by the decoder
	}
	if _, ok := f.scanner.value(0); !ok {
		return "", false, errNotJSON
	}
	return "", false, nil
}

// readKey reads an object's key and the colon after it.
func (f *fieldFinder) readKey() (string, error) {
	f.ws()
	start := f.p
	if !f.string() {
		return "", errNotJSON
	}
	var key string
	if err := json.Unmarshal(f.b[start:f.p], &key); err != nil || !f.wsLit(":") {
		return "", errNotJSON
	}
	return key, nil
}

// object walks an object decoded into the struct type t.
func (f *fieldFinder) object(t reflect.Type) (string, bool, error) {
	fields := structFields(t)
	f.p++ // '{'
	if f.wsLit("}") {
		return "", false, nil
	}
	for {
		key, err := f.readKey()
		if err != nil {
			return "", false, err
		}
		name, ft, known := lookupField(fields, key)
		if !known {
			f.key = key
			return strings.TrimPrefix(strings.Join(f.path, ""), "."), true, nil
		}
		if path, found, more, err := f.member("."+name, ft, '}'); err != nil || found || !more {
			return path, found, err
		}
	}
}

// members walks an object decoded into a map of elem values.
func (f *fieldFinder) members(elem reflect.Type) (string, bool, error) {
	f.p++ // '{'
	if f.wsLit("}") {
		return "", false, nil
	}
	for {
		key, err := f.readKey()
		if err != nil {
			return "", false, err
		}
		if path, found, more, err := f.member("["+clipKey(key)+"]", elem, '}'); err != nil || found || !more {
			return path, found, err
		}
	}
}

// elements walks an array decoded into a slice or array of elem values.
func (f *fieldFinder) elements(elem reflect.Type) (string, bool, error) {
	f.p++ // '['
	if f.wsLit("]") {
		return "", false, nil
	}
	for i := 0; ; i++ {
		if path, found, more, err := f.member("["+strconv.Itoa(i)+"]", elem, ']'); err != nil || found || !more {
			return path, found, err
		}
	}
}

// member walks one member's value, of type t, with step (".name", "[k]",
// "[i]") on the path, then the comma or close after it: more reports
// whether another member follows (path is "" unless found).
func (f *fieldFinder) member(step string, t reflect.Type, close byte) (path string, found, more bool, err error) {
	f.path = append(f.path, step)
	path, found, err = f.value(t)
	f.path = f.path[:len(f.path)-1]
	if err != nil || found {
		return path, found, false, err
	}
	more, err = f.more(close)
	return "", false, more, err
}

// more ends a member of an object or array (close is '}' or ']'): it
// reports whether another member follows.
func (f *fieldFinder) more(close byte) (bool, error) {
	f.ws()
	switch {
	case f.lit(","):
		return true, nil
	case f.p < len(f.b) && f.b[f.p] == close:
		f.p++
		return false, nil
	}
	return false, errNotJSON
}

// structField is a field encoding/json decodes a key into.
type structField struct {
	name string
	typ  reflect.Type
}

// structFields lists the fields encoding/json decodes an object into for
// the struct type t: exported fields by their JSON name (json:"-" left
// out) and the fields of embedded structs, a name at a shallower depth
// hiding the same name deeper (submitRequest's handler hides
// axapi.SubmitRequest's).
func structFields(t reflect.Type) []structField {
	var out []structField
	seen := map[string]bool{}
	for level := []reflect.Type{t}; len(level) > 0; {
		var next []reflect.Type
		var found []structField
		for _, st := range level {
			for i := range st.NumField() {
				sf := st.Field(i)
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, _, _ := strings.Cut(tag, ",")
				if sf.Anonymous && name == "" {
					ft := sf.Type
					if ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
					}
					if ft.Kind() == reflect.Struct {
						next = append(next, ft)
						continue
					}
				}
				if !sf.IsExported() {
					continue
				}
				if name == "" {
					name = sf.Name
				}
				if !seen[name] {
					found = append(found, structField{name, sf.Type})
				}
			}
		}
		for _, jf := range found {
			seen[jf.name] = true
		}
		out = append(out, found...)
		level = next
	}
	return out
}

// lookupField finds the field key decodes into as encoding/json does: the
// field named key exactly, else one whose name equals it without regard
// to case.
func lookupField(fields []structField, key string) (name string, typ reflect.Type, ok bool) {
	for _, jf := range fields {
		if jf.name == key {
			return jf.name, jf.typ, true
		}
	}
	for _, jf := range fields {
		if strings.EqualFold(jf.name, key) {
			return jf.name, jf.typ, true
		}
	}
	return "", nil, false
}
