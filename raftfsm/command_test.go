package raftfsm

import (
	"errors"
	"runtime"
	"testing"
)

// allocBytes returns how many bytes fn allocates.
func allocBytes(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A corrupt array header must not make the decoder allocate for elements the
// input cannot hold. msgpack v5.4.1 sizes a slice of structs from the header
// alone, so six bytes asked for 4 Mi commands (hundreds of MiB), and
// 0xffffffff elements for hundreds of GiB: an out-of-memory crash that
// recover cannot catch. DecodeResults reads peer API bodies, so there the
// input comes from the network.
func TestDecodeBoundsAllocation(t *testing.T) {
	const limit = 1 << 20
	header := []byte{0xdd, 0x00, 0x40, 0x00, 0x00} // array32 of 4 Mi elements, then nothing
	var err error
	if n := allocBytes(func() { _, err = DecodeEntry(append([]byte{EntryVersion}, header...)) }); n > limit {
		t.Errorf("DecodeEntry allocated %d bytes for a %d-byte input", n, len(header)+1)
	}
	if !errors.Is(err, ErrBadEntry) {
		t.Errorf("DecodeEntry err %v, want ErrBadEntry", err)
	}
	if n := allocBytes(func() { _, err = DecodeResults(header) }); n > limit {
		t.Errorf("DecodeResults allocated %d bytes for a %d-byte input", n, len(header))
	}
	if err == nil {
		t.Error("DecodeResults accepted a truncated array")
	}
	// The largest header: must fail, not crash.
	if _, err := DecodeEntry([]byte{EntryVersion, 0xdd, 0xff, 0xff, 0xff, 0xff}); !errors.Is(err, ErrBadEntry) {
		t.Errorf("DecodeEntry err %v, want ErrBadEntry", err)
	}
	if _, err := DecodeResults([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}); err == nil {
		t.Error("DecodeResults accepted a truncated array")
	}
}

func TestDecodeNilAndEmptyArrays(t *testing.T) {
	for _, data := range [][]byte{{EntryVersion, 0xc0}, {EntryVersion, 0x90}} {
		cmds, err := DecodeEntry(data)
		if err != nil || len(cmds) != 0 {
			t.Errorf("%x: %v, %v", data, cmds, err)
		}
	}
	for _, data := range [][]byte{{0xc0}, {0x90}} {
		rs, err := DecodeResults(data)
		if err != nil || len(rs) != 0 {
			t.Errorf("%x: %v, %v", data, rs, err)
		}
	}
}

func FuzzDecodeEntry(f *testing.F) {
	s := spec("order.timeout", `{"id":42}`)
	for _, cmds := range [][]Command{
		nil,
		{submitCmd("order|42", s, 5000, 1000)},
		{overwriteCmd("a", s, 1, 2), fireCmd("a", 1, 1, "n1", 3, 4), completeCmd("a", 1, 1, OutcomeBusy, "", 5, 6)},
		{cancelCmd("日本", 9), nodeCmd(Node{ID: "n1", Executors: flagExec("*", "h")}), {Type: 99}},
	} {
		b, err := EncodeEntry(cmds)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{EntryVersion})
	f.Add([]byte{EntryVersion, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{EntryVersion, 0x91, 0x82, 0xa1, 't', 0x01, 0xa1, 's', 0xc0})
	f.Fuzz(func(t *testing.T, data []byte) {
		cmds, err := DecodeEntry(data)
		if err != nil {
			if !errors.Is(err, ErrBadEntry) {
				t.Fatalf("error %v does not wrap ErrBadEntry", err)
			}
			return
		}
		// What decodes encodes again, and decodes to as many commands.
		b, err := EncodeEntry(cmds)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := DecodeEntry(b)
		if err != nil || len(again) != len(cmds) {
			t.Fatalf("re-decode: %d commands, %v; want %d", len(again), err, len(cmds))
		}
		for i := range cmds {
			if again[i].Type != cmds[i].Type {
				t.Fatalf("command %d: type %d, want %d", i, again[i].Type, cmds[i].Type)
			}
		}
	})
}
