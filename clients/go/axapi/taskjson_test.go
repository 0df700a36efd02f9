package axapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"
)

// oldTaskMarshal is MarshalJSON as it was before appendTaskJSON: the view
// through encoding/json.
func oldTaskMarshal(t Task) ([]byte, error) {
	v := taskJSON{taskAlias: taskAlias(t)}
	raw := len(t.Payload) > 0 && !t.PayloadBase64 && utf8.Valid(t.Payload) && json.Valid(t.Payload)
	if len(t.Payload) > 0 && !raw {
		v.PayloadB64 = base64.StdEncoding.EncodeToString(t.Payload)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	out := bytes.TrimRight(buf.Bytes(), "\n")
	if !raw {
		return out, nil
	}
	res := append([]byte(nil), out[:len(out)-1]...)
	res = append(res, `,"payload":`...)
	res = append(res, t.Payload...)
	return append(res, '}'), nil
}

var tjStrings = []string{"", "", "a", "plain-id_1.2/x", "with \"quote\"", `back\slash`, "<b>&amp;</b>", "é ü 中", "line\nbreak\ttab", "\x00\x1f", "\u2028\u2029", "bad \xff utf8", "~!@#$%^*()"}

func tjTime(r *rand.Rand) time.Time {
	zones := []*time.Location{time.UTC, time.FixedZone("p", 5*3600+1800), time.FixedZone("s", -7*3600-17)}
	years := []int{2026, 1970, 1, 9999}
	y, zone := years[r.IntN(len(years))], zones[r.IntN(len(zones))]
	if r.IntN(60) == 0 { // refused by time.Time.MarshalJSON
		if r.IntN(2) == 0 {
			y = []int{10000, -1}[r.IntN(2)]
		} else {
			zone = time.FixedZone("big", 25*3600)
		}
	}
	return time.Date(y, time.Month(1+r.IntN(12)), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(3)*r.IntN(1e9), zone)
}

// fillRandom sets every field of the struct v points to (recursively for
// pointers to structs) to a random value of its kind, zero a third of the
// time, so that every field of Task, including one added later, is
// exercised.
func fillRandom(r *rand.Rand, v reflect.Value) {
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		if r.IntN(3) == 0 {
			continue // zero
		}
		switch f.Interface().(type) {
		case time.Time:
			f.Set(reflect.ValueOf(tjTime(r)))
			continue
		case *time.Time:
			t := tjTime(r)
			f.Set(reflect.ValueOf(&t))
			continue
		case json.RawMessage:
			pool := []string{`{"ok":true}`, `[1, 2 ,3]`, ` "s" `, `12`, `{bad`}
			n := len(pool) - 1
			if r.IntN(20) == 0 {
				n++ // the invalid one
			}
			f.Set(reflect.ValueOf(json.RawMessage(pool[r.IntN(n)])))
			continue
		case []byte:
			pool := []string{`{"a": 1}`, `not json`, "\x00\x01", `"x"`}
			f.SetBytes([]byte(pool[r.IntN(len(pool))]))
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString(tjStrings[r.IntN(len(tjStrings))])
		case reflect.Int:
			f.SetInt(int64(r.IntN(2000) - 1000))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Float64:
			pool := []float64{0, 1.5, 2, 1e21, 1e-7, 0.1, math.NaN()}
			n := len(pool) - 1
			if r.IntN(20) == 0 {
				n++ // NaN
			}
			f.SetFloat(pool[r.IntN(n)])
		case reflect.Map:
			m := reflect.MakeMap(f.Type())
			for j := r.IntN(4); j > 0; j-- {
				m.SetMapIndex(reflect.ValueOf(tjStrings[r.IntN(len(tjStrings))]), reflect.ValueOf(tjStrings[r.IntN(len(tjStrings))]))
			}
			f.Set(m)
		case reflect.Pointer:
			p := reflect.New(f.Type().Elem())
			switch p.Elem().Kind() {
			case reflect.Struct:
				fillRandom(r, p.Elem())
			case reflect.Int:
				p.Elem().SetInt(int64(r.IntN(10)))
			default:
				panic("fillRandom: pointer to " + p.Elem().Kind().String())
			}
			f.Set(p)
		default:
			panic("fillRandom: field " + v.Type().Field(i).Name + " of kind " + f.Kind().String())
		}
	}
}

// MarshalJSON writes byte for byte what encoding/json wrote for the view
// (and fails where it failed), for tasks with every field random: odd
// strings (quotes, control characters, invalid UTF-8, U+2028, HTML),
// times in odd zones and out of range, labels, backoff floats including
// NaN, shards, results valid and not, payloads JSON and not.
func TestTaskJSONSameAsReflection(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 19))
	fails := 0
	for i := 0; i < 20000; i++ {
		var task Task
		fillRandom(r, reflect.ValueOf(&task).Elem())
		want, wantErr := oldTaskMarshal(task)
		got, err := task.MarshalJSON()
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("task %+v: error %v, encoding/json %v", task, err, wantErr)
		}
		if wantErr != nil {
			fails++
			continue
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("task %d differs:\ngot  %s\nwant %s", i, got, want)
		}
	}
	if fails == 0 || fails > 10000 {
		t.Fatalf("%d of 20000 random tasks failed to encode: the cases are off", fails)
	}
}

func BenchmarkTaskMarshalJSON(b *testing.B) {
	now := time.Date(2026, 12, 4, 22, 0, 0, 123456789, time.UTC)
	task := Task{ID: "bench-123", Handler: "ax-bench.noop", State: "WAITING", Priority: 2, MaxAttempts: 3, Timeout: "30s",
		RunAt: &now, Run: 1, CreatedAt: now, UpdatedAt: now, Payload: []byte(`{"n":1}`)}
	for _, c := range []struct {
		name string
		fn   func(Task) ([]byte, error)
	}{{"append", Task.MarshalJSON}, {"reflection", oldTaskMarshal}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.fn(task); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
