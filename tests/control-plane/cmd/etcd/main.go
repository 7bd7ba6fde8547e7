// Command etcd is etcd's own main (go.etcd.io/etcd/server/v3/etcdmain), built from the version
// k8s.io/kubernetes v1.33.13 is tested against, so the control plane needs nothing but this module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
