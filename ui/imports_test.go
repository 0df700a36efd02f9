package ui

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports holds the package to what doc.go allows: the standard
// library and the socket API's wire types, so that every read and action
// can only go through the socket.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			first := strings.Split(p, "/")[0]
			if p != "github.com/axsched/ax/clients/go/axapi" && strings.Contains(first, ".") {
				t.Errorf("%s imports %s: ui may import only the standard library and clients/go/axapi", name, p)
			}
		}
	}
}
