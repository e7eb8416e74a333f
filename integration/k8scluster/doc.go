// Package k8scluster runs a real single-node Kubernetes cluster for
// doorman's end-to-end tests, started and torn down by the tests
// themselves: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kube-proxy, the kubelet and containerd 2, driven with
// kubectl as an operator would drive them. No registry and no network are
// needed: .ci/build-cluster builds the Kubernetes binaries from the Go
// module proxy into DefaultBinDir, .ci/run builds containerd 2 into
// DefaultContainerdDir, and the images the pods run are built by the tests
// and imported into the node's containerd (ImportImage).
//
// It is a normal package (not a _test.go file) so that every test package
// can share it, like integration/testnet. Tests need root; Start skips
// the test when the binaries are missing.
//
// # Where the cluster runs
//
// The whole cluster runs inside testnet's host namespace, which plays the
// node, and inside a mount namespace of its own (a host session, package
// hostsession): the machine's root network namespace, its mount table and
// its files stay untouched.
//
//	 pods (cni0 bridge, 198.51.100.128/26)     node = testnet host netns            testnet inet netns
//	┌───────────────────────────┐            ┌──────────────────────────────┐      ┌──────────────────────┐
//	│ eth0 198.51.100.13x       ├── veth ────┤ cni0 198.51.100.129          │      │ DNS 203.0.113.53     │
//	│ resolv.conf: 203.0.113.53 │            │ eth0 198.51.100.2 (node IP) ─┼─veth─┤ AddHost servers      │
//	└───────────────────────────┘            │ etcd, apiserver :6443, ...   │      │ 203.0.113.100-250    │
//	                                         │ kubelet, containerd, proxies │      └──────────────────────┘
//	                                         └──────────────────────────────┘
//
// In the node's mount namespace /var/lib, /var/log, /usr/libexec, /opt and
// /run are overlays whose upper layers live in the cluster's directory
// (Dir), so the paths the kubelet, libcni and containerd's shims hard-code
// (/var/lib/kubelet, /var/lib/cni, /var/log/pods, /var/log/containers,
// /usr/libexec/kubernetes, /run/containerd) and the hostPath volumes of
// DaemonSets (/opt/cni/bin, /run/doorman, /var/log/doorman) are the
// node's own; /var/lib/kubelet is a bind of the cluster directory's
// kubelet/ (a real filesystem: cAdvisor finds no device for an overlay,
// and the node would report no ephemeral storage). /etc/cni/net.d is the
// cluster's net.d (none of the machine's CNI files), /etc/resolv.conf
// names the fake internet's resolver, and the kernel tunables the kubelet would set (kernel.panic,
// kernel.panic_on_oops, vm.overcommit_memory, ...) are files with the
// kubelet's values bound over /proc/sys. NodePath reads the node's files
// from the test (/proc/<pid>/root), NodeRun runs a command on the node.
//
// # The components
//
//   - etcd on 127.0.0.1:2379 over http.
//   - kube-apiserver on :6443 (the node's address and 127.0.0.1), with a
//     PKI made with crypto/x509 (one CA; every component a client
//     certificate), Node,RBAC authorization, NodeRestriction,
//     service-account keys, --allow-privileged=true, services in
//     ServiceCIDR, and --shutdown-send-retry-after (a stop takes about 2 s,
//     not the minute long-running requests would otherwise get).
//   - kube-controller-manager and kube-scheduler with --leader-elect=false
//     (the controllers each with its service account's role,
//     --use-service-account-credentials, as kubeadm sets it).
//   - containerd 2 with restrict_oom_score_adj (this VM lacks
//     CAP_SYS_RESOURCE), its own runc shim first on PATH, the native
//     snapshotter, cgroupfs, and PauseImage (built from integration/pause)
//     as its pinned sandbox image.
//   - the kubelet with cgroupfs, a cgroupRoot of the cluster's
//     (CgroupRoot), failCgroupV1: false, failSwapOn: false, no eviction
//     for the shared machine's disk or memory, and the fake internet's
//     resolver as clusterDNS (there is no cluster DNS service).
//   - kube-proxy in iptables mode, started once the kubelet has registered
//     the node, so that the kubernetes service (APIServiceIP) reaches the
//     API server from the node and its pods, as client-go's in-cluster
//     configuration expects.
//
// The node's primary CNI network (PrimaryConflist in /etc/cni/net.d) is
// what a CNI's DaemonSet would write: the reference bridge (cni0) and
// host-local plugins on PodCIDR, built from the containernetworking/plugins
// version in go.mod, and Debian's portmap; /opt/cni/bin also holds the
// reference loopback plugin. Pods reach the fake internet through the
// node, whose default route ends in testnet's inet namespace: nothing
// leaves the machine.
//
// # Lifecycle
//
// Start starts a cluster for one test; Shared starts one for the whole
// test binary on the first call and returns it to every later test
// (TestMain calls StopShared after m.Run). Start waits for each component
// to serve and then for the node's Ready condition. Everything is undone
// with the test's (or Shared's) cleanup, also on failure: the kubelet is
// stopped, every pod is stopped and removed through the CRI (so their CNI
// DELs run), containerd and its shims, kube-proxy and the control plane
// are stopped, any process left in the node's mount namespace is killed
// and reported, the session (and with it every mount) ends, the cgroups
// below CgroupRoot are removed, then the cluster's directory, then
// testnet's namespaces. A failed test gets the tail of every component's
// log (DumpLogs) and, for its namespaces, their pods and events;
// DOORMAN_K8S_LOGS=DIR keeps a copy of the logs in DIR.
//
// # Using it
//
//	c := k8scluster.Shared(t)
//	ns := c.Namespace(t, nil)               // deleted, with its pods, at t's end
//	api := c.AddHost(t, "api-"+ns+".test")  // a server in the fake internet
//	c.ImportImage(t, archive)               // an image the pods run, imagePullPolicy: Never
//	c.Apply(t, podYAML)                     // kubectl apply -f -
//	c.WaitPodReady(t, ns, "web", time.Minute)
//	r := c.Exec(t, ns, "web", "/probe", "get", "https://"+api.Name()+"/")
//	c.Kubectl(t, "-n", ns, "logs", "web")   // any kubectl command
//	c.NodeRun(t, "/opt/cni/bin/doorman", "ls")
//	os.ReadFile(c.NodePath("/etc/cni/net.d/" + k8scluster.PrimaryConflist))
//	c.StopComponent(t, k8scluster.APIServer) // SIGTERM; KillComponent: a crash
//	c.StartComponent(t, k8scluster.APIServer) // waits until it serves; RestartComponent
//	c.WaitFor(t, time.Minute, "what", func() (bool, string) { ... })
package k8scluster
