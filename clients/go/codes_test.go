package ax_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"

	"github.com/axsched/ax/clients/go/axapi"
)

// Test_ErrorCodes_MatchServer fails when the client does not declare a Code
// constant for every code of the API's error table (axapi.ErrorTable, which
// the sidecar serves), or declares one the table does not have. The Code
// constants of errors.go are read from the source, since a test cannot list
// a package's constants otherwise.
func Test_ErrorCodes_MatchServer(t *testing.T) {
	clientCodes := declaredCodes(t, "errors.go")
	if len(clientCodes) == 0 {
		t.Fatal("no Code constants found in errors.go")
	}
	for _, c := range clientCodes {
		if codeOf(c) == "" {
			t.Errorf("client constant axapi.%s is not a code of axapi's error table", c)
		}
	}
	for _, e := range axapi.ErrorTable() {
		if !slices.ContainsFunc(clientCodes, func(name string) bool { return codeOf(name) == e.Code }) {
			t.Errorf("code %q is unknown to the client: add a Code constant and, if it needs one, a sentinel", e.Code)
		}
	}
}

// codeOf resolves the name of an axapi Code constant.
func codeOf(name string) string {
	for _, code := range axapi.Codes() {
		if constName(code) == name {
			return code
		}
	}
	return ""
}

// constName is the axapi constant of a code: "not_found" → "CodeNotFound",
// "invalid_json" → "CodeInvalidJSON".
func constName(code string) string {
	var b strings.Builder
	b.WriteString("Code")
	for _, part := range strings.Split(code, "_") {
		if part == "json" {
			b.WriteString("JSON")
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// declaredCodes returns the axapi constants the Code… constants of the Go
// file at path are declared as (CodeNotFound = axapi.CodeNotFound).
func declaredCodes(t *testing.T, path string) []string {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	ast.Inspect(file, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok {
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
					continue
				}
				if sel, ok := vs.Values[i].(*ast.SelectorExpr); ok {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "axapi" {
						codes = append(codes, sel.Sel.Name)
					}
				}
			}
		}
		return true
	})
	return codes
}
