// Command pause is the sandbox ("pause") container of the CRI tests: the
// process that holds a pod's namespaces while its containers come and go,
// as registry.k8s.io/pause does on a real node. The tests cannot pull that
// image (no registry is reachable), so they build this static binary, pack
// it as a one-layer image and point containerd's sandbox_image at it.
//
// It blocks until SIGTERM or SIGINT and then exits 0. It must handle those
// signals itself: as PID 1 of the pod's PID namespace, a signal it has no
// handler for is ignored by the kernel, and a stop would then wait for the
// runtime's SIGKILL.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
