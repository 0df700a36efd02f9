package raftfsm

import (
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// checkLengths accepts every msgpack format the encoder writes (each
// size class of numbers, strings, binaries, arrays, maps, extensions)
// and refuses each of them cut short, a length over the input, an unused
// code and nesting past maxNesting.
func TestCheckLengths(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	values := []any{
		nil, true, false, 0, 1, -1, 127, -32, -33, 128, 255, 256, 65535, 65536, 1 << 31, -(1 << 31), 1 << 40, -(1 << 40),
		uint64(1 << 63), float32(1.5), 2.5, "", long(31), long(32), long(255), long(256), long(65536),
		[]byte{}, []byte("abc"), make([]byte, 300), make([]byte, 70000),
		[]int{}, make([]int, 15), make([]int, 16), make([]int, 70000),
		map[string]int{}, map[string]int{"a": 1}, bigMap(16), bigMap(70000),
		time.Unix(1, 0), time.Unix(1, 5), time.Date(3000, 1, 1, 0, 0, 0, 1, time.UTC),
		[]any{map[string]any{"a": []any{1, "b", nil, []byte{1}}}},
	}
	for _, v := range values {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkLengths(b); err != nil {
			t.Errorf("%T %.40v (% x): %v", v, v, b[:min(len(b), 8)], err)
		}
		if len(b) > 1 {
			if err := checkLengths(b[:len(b)-1]); err == nil {
				t.Errorf("%T %.40v cut short: accepted", v, v)
			}
		}
	}
	for _, b := range [][]byte{
		{},
		{0xc1},
		{0xdd, 0x91, 0x84, 0xa1, 0x68}, // array of 2 443 486 824 in 5 bytes
		{0xdb, 0xff, 0xff, 0xff, 0xff}, // string of 4 GiB
		[]byte(strings.Repeat("\x91", maxNesting+2) + "\xc0"),
	} {
		if err := checkLengths(b); err == nil {
			t.Errorf("% x: accepted", b)
		}
	}
	if err := checkLengths([]byte(strings.Repeat("\x91", maxNesting) + "\xc0")); err != nil {
		t.Errorf("nesting %d: %v", maxNesting, err)
	}
}

func bigMap(n int) map[int]int {
	m := make(map[int]int, n)
	for i := range n {
		m[i] = i
	}
	return m
}
