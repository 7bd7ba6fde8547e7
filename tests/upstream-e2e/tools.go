//go:build tools

// Package tools pins what `cargo xtask e2e upstream` builds from upstream Karpenter's module: its end-to-end
// suites (`go test -c sigs.k8s.io/karpenter/test/suites/<suite>`) and its KWOK controller
// (`go build sigs.k8s.io/karpenter/kwok`). The blank imports keep the packages those need in go.mod and go.sum.
package tools

import (
	_ "sigs.k8s.io/karpenter/kwok/cloudprovider"
	_ "sigs.k8s.io/karpenter/test/pkg/environment/common"
)
