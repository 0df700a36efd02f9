package main

import (
	"runtime/debug"
	"testing"
)

func TestVersionOf(t *testing.T) {
	vcs := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "580b4fc0123456789abcdef0123456789abcdef0"}, {Key: "vcs.modified", Value: "true"},
	}}
	for _, c := range []struct {
		name             string
		bi               *debug.BuildInfo
		ldVersion, ldRev string
		want             string
	}{
		{"no build info", nil, "", "", "devel (commit unknown)"},
		{"-buildvcs=false", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "", "", "devel (commit unknown)"},
		{"vcs stamp", vcs, "", "", "devel (commit 580b4fc01234-dirty)"},
		{"module version", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "", "", "v1.4.0 (commit unknown)"},
		{"ldflags win", vcs, "v2.0.0", "abcdef", "v2.0.0 (commit abcdef)"},
		{"ldflags version only", vcs, "v2.0.0", "", "v2.0.0 (commit 580b4fc01234-dirty)"},
	} {
		if got := versionOf(c.bi, c.ldVersion, c.ldRev); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
