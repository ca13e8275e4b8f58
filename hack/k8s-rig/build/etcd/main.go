// Command etcd is go.etcd.io/etcd/server/v3 v3.6.5's etcd.
//
// `go install go.etcd.io/etcd/server/v3@v3.6.5` does not work (the etcd server
// module has replace directives), so this wrapper builds the same main from
// the rig's build module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
