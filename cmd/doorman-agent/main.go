// Command doorman-agent is doorman's Kubernetes node agent (package
// kube/agent), run by the DaemonSet beside `doorman install-cni`. It is
// a binary of its own, not a subcommand of doorman: every CNI ADD execs
// doorman, and Kubernetes' client libraries would add their package
// initialization (about 25 ms, measured) and 15 MB to each of them.
//
//	doorman-agent [--config FILE] [--node-name NAME] [--kubeconfig FILE] [--metrics-addr ADDR]
//
// Exit status: 0 stopped by a signal, 1 failed, 2 bad usage or config.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	npaclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/doorman-net/doorman/kube/agent"
	"github.com/doorman-net/doorman/plugin"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("doorman-agent", flag.ContinueOnError)
	config := fs.String("config", "/etc/doorman/install-cni.json", "the installer's config (`file`): the node's defaults and the \"agent\" key")
	node := fs.String("node-name", os.Getenv("NODE_NAME"), "this node's `name` (default $NODE_NAME)")
	kubeconfig := fs.String("kubeconfig", "", "a kubeconfig `file` (default: the pod's service account)")
	metrics := fs.String("metrics-addr", ":9489", "serve Prometheus metrics on `addr` (\"\" none)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	data, err := os.ReadFile(*config)
	if err != nil {
		fmt.Fprintf(os.Stderr, "doorman-agent: --config: %v\n", err)
		return 2
	}
	settings, err := plugin.ParseSettings(data)
	if err != nil {
		fmt.Fprintf(os.Stderr, "doorman-agent: --config %s: %v\n", *config, err)
		return 2
	}
	var rc *rest.Config
	if *kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "doorman-agent: API server: %v\n", err)
		return 1
	}
	rc.UserAgent = "doorman-agent"
	kc, err := kubernetes.NewForConfig(rc)
	if err == nil {
		var nc *npaclient.Clientset
		var dc *dynamic.DynamicClient
		if nc, err = npaclient.NewForConfig(rc); err == nil {
			if dc, err = dynamic.NewForConfig(rc); err == nil {
				var a *agent.Agent
				a, err = agent.New(agent.Config{NodeName: *node, Settings: settings, Kube: kc, NetworkPolicy: nc, Dynamic: dc, MetricsAddr: *metrics, Log: log})
				if err != nil {
					fmt.Fprintf(os.Stderr, "doorman-agent: %v\n", err)
					return 2
				}
				ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
				defer stop()
				if err = a.Run(ctx); err == nil {
					log.Info("stopping")
					return 0
				}
			}
		}
	}
	log.Error("failed", "error", err.Error())
	return 1
}
