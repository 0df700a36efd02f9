package delivery

import (
	"strings"
	"testing"
)

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

// A count is a JSON number of an integer value: 3.0 and 3e0 are 3 (an
// executor's encoder may write a whole float so; they were refused, "cannot
// unmarshal number 3.0 into ... int"), 3.5 is not, and neither is a number
// an int64 cannot hold. A count given twice is ambiguous and refused (the
// last one, 4, was taken).
func TestParseShardCountNumbers(t *testing.T) {
	for body, want := range map[string]int{
		`{"count":3.0}`: 3, `{"count":3e0}`: 3, `{"count":3E+0}`: 3, `{"count":0.3e1}`: 3, `{"count":30e-1}`: 3,
		`{"count":1.000}`: 1, `{"count":1e3}`: 1000, `{"count":9223372036854775807}`: 2147483647,
		`{"count":9223372036854775808}`: 2147483647, `{"count":1e300}`: 2147483647,
		`{"count":3.0000000000000001}`: 3, // a float64, as JSON decoders read it
	} {
		if n, err := ParseShardCount([]byte(body)); err != nil || n != want {
			t.Errorf("%s: %d, %v; want %d", body, n, err, want)
		}
	}
	for body, msg := range map[string]string{
		`{"count":3.5}`:                    "shards answer: count 3.5: not an integer",
		`{"count":35e-1}`:                  "not an integer",
		`{"count":1e-2147483648}`:          "count must be at least 1",
		`{"count":1e400}`:                  "shards answer: count 1e400: out of range",
		`{"count":1e99999999999999999999}`: "out of range",
		`{"count":0.0}`:                    "count must be at least 1, got 0.0",
		`{"count":-3e0}`:                   "count must be at least 1, got -3e0",
		`{"count":"3"}`:                    `count must be a JSON number, got "3"`,
		`{"count":null}`:                   "no count",
		`{"count":true}`:                   "count must be a JSON number, got true",
		`{"count":3,"count":4}`:            `shards answer: want {"count": n}: invalid json: duplicate key "count"`,
		`{"count":4,"Count":4}`:            `duplicate key "Count"`,
	} {
		n, err := ParseShardCount([]byte(body))
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %d, %v; want an error with %q", body, n, err, msg)
		}
	}
}
