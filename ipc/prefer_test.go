package ipc

import "testing"

// prefersMinimal reads RFC 7240's grammar: the first "return" decides,
// commas and semicolons inside a quoted value separate nothing, unknown
// or malformed preferences are ignored. (From the review of Prefer.)
func TestPrefersMinimal(t *testing.T) {
	for h, want := range map[string]bool{
		"return=minimal": true, "return=minimal;x": true, `RETURN = "minimal"`: true,
		"return=representation, return=minimal": false, "": false, "garbage!!;;,,==": false,
		"respond-async, return=minimal": true, `foo="x, return=minimal, y"`: false,
		`foo="a,b", return=minimal`: true, `return="minimal;x"`: false, `return="minimal";x=1`: true,
		"return": false, "return;x=1, return=minimal": false, "return=": false, ",,return=minimal": true,
		"respond-async,return=minimal": true, `return="minimal`: false, "wait=1;return=minimal": false,
	} {
		if got := prefersMinimal([]byte(h)); got != want {
			t.Errorf("%q: %v, want %v", h, got, want)
		}
	}
}
