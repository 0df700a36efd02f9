package delivery

import "testing"

func TestParseShardCount(t *testing.T) {
	for body, want := range map[string]int{`{"count":5}`: 5, `{"count": 1, "x": 2}`: 1, `{"count":4096}`: 4096} {
		if n, err := ParseShardCount([]byte(body)); err != nil || n != want {
			t.Errorf("%s: %d, %v", body, n, err)
		}
	}
	for _, body := range []string{``, `5`, `{}`, `{"count":0}`, `{"count":-1}`, `{"count":"5"}`, `{"count":1.5}`, `[1]`} {
		if n, err := ParseShardCount([]byte(body)); err == nil {
			t.Errorf("%q: %d, want an error", body, n)
		}
	}
}
