//go:build tools

// Package cniplugins pins, in go.mod, the modules that the reference CNI
// plugins (bridge, host-local, loopback, firewall) need, so that the tests
// and `doorman run` can build them from the containernetworking/plugins
// module at the version doorman already depends on. The file is never
// compiled; `go mod tidy` reads its imports.
package cniplugins

import (
	_ "github.com/containernetworking/cni/libcni"
	_ "github.com/containernetworking/plugins/pkg/ip"
	_ "github.com/containernetworking/plugins/pkg/ipam"
	_ "github.com/containernetworking/plugins/pkg/link"
	_ "github.com/containernetworking/plugins/pkg/netlinksafe"
	_ "github.com/containernetworking/plugins/pkg/utils/buildversion"
	_ "github.com/containernetworking/plugins/pkg/utils/sysctl"
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"
	_ "github.com/godbus/dbus/v5"
	_ "github.com/networkplumbing/go-nft/nft"
)
