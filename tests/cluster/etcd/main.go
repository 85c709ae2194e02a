// Command etcd is the upstream etcd server (go.etcd.io/etcd/server/v3),
// built from the Go module so no prebuilt binary has to be downloaded.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
