package ax_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Test_ErrorCodes_MatchServer fails when the error codes of the sidecar
// (ipc/errors.go, two directories up in the repository) and those of this
// client (the Code constants of errors.go) drift apart. This module cannot
// import the server's, so the test reads both sources. The server declares a
// code as a Code field in a composite literal (&Error{Code: "not_found"}) or
// as a string constant named Code…. It skips when the server's file is not
// there (the module used outside the repository).
func Test_ErrorCodes_MatchServer(t *testing.T) {
	clientCodes := declaredCodes(t, "errors.go")
	if len(clientCodes) == 0 {
		t.Fatal("no Code constants found in errors.go")
	}
	path := filepath.Join("..", "..", "ipc", "errors.go")
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s not found", path)
	}
	serverCodes := declaredCodes(t, path)
	if len(serverCodes) == 0 {
		t.Fatalf("found no error codes in %s: update this test to its layout", path)
	}
	for _, c := range clientCodes {
		if !slices.Contains(serverCodes, c) {
			t.Errorf("client code %q is not declared in %s", c, path)
		}
	}
	for _, c := range serverCodes {
		if !slices.Contains(clientCodes, c) {
			t.Errorf("server code %q (%s) is unknown to the client: add a Code constant and, if it needs one, a sentinel", c, path)
		}
	}
}

// declaredCodes returns the error codes declared in the Go file at path.
func declaredCodes(t *testing.T, path string) []string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	file, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	add := func(e ast.Expr) {
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil && !slices.Contains(codes, s) {
				codes = append(codes, s)
			}
		}
	}
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.KeyValueExpr: // &Error{Code: "not_found", ...}
			if key, ok := n.Key.(*ast.Ident); ok && key.Name == "Code" {
				add(n.Value)
			}
		case *ast.ValueSpec: // CodeNotFound = "not_found"
			for i, name := range n.Names {
				if strings.HasPrefix(name.Name, "Code") && i < len(n.Values) {
					add(n.Values[i])
				}
			}
		}
		return true
	})
	return codes
}
