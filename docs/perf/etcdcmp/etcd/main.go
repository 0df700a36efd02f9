// Command etcd is etcd's server, built from its module (etcdmain.Main)
// for the comparison in the parent directory: no prebuilt etcd binary
// can be downloaded on the project's machine, and the Go module proxy
// serves its source.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
