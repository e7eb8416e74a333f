package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	npa "sigs.k8s.io/network-policy-api/apis/v1beta1"
	npaclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/internal/atomicfile"
	"github.com/doorman-net/doorman/kube/agentclient"
	"github.com/doorman-net/doorman/kube/api/v1alpha1"
	"github.com/doorman-net/doorman/kube/policy"
	"github.com/doorman-net/doorman/plugin"
	"github.com/doorman-net/doorman/sandbox"
)

// Config is what the agent needs.
type Config struct {
	// NodeName is the node's name (the DaemonSet passes spec.nodeName).
	NodeName string
	// Settings are the installer's (install-cni.json): the node's
	// defaults, and in Agent where the agent's files go.
	Settings *plugin.Settings
	// Kube, NetworkPolicy and Dynamic are the API clients.
	Kube          kubernetes.Interface
	NetworkPolicy npaclient.Interface
	Dynamic       dynamic.Interface
	// MetricsAddr is where metrics are served ("" none).
	MetricsAddr string
	// Log is where the agent logs (JSON lines on stderr in the DaemonSet).
	Log *slog.Logger
}

// Agent is the node agent.
type Agent struct {
	cfg      Config
	dir      string
	defaults policy.Defaults
	metrics  *Metrics
	log      *slog.Logger

	nodePods   *source
	namespaces *source
	nodes      *source
	cnps       *source // nil: the CRD is not installed
	eps        *source // nil: the CRD is not installed
	allPods    *source // nil until a peer needs it
	// cnpsPending and epsPending are the sources of a CRD installed
	// after the agent started, until they have synced.
	cnpsPending, epsPending *source
	synced                  chan struct{}

	trigger chan struct{}
	events  chan *corev1.Event

	mu      sync.Mutex
	answers map[string]*agentclient.Answer // by namespace/name
	emitted map[string]bool                // event names created
	changed chan struct{}                  // closed and replaced when answers change
	secrets map[string]time.Time           // secret file -> when read
}

// New returns an agent for cfg.
func New(cfg Config) (*Agent, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("agent: no node name (set NODE_NAME from spec.nodeName)")
	}
	s := cfg.Settings
	if s == nil || s.Agent == nil {
		return nil, errors.New(`agent: the installer's config has no "agent" key, so the CNI plugin would not ask the agent: add "agent": {}`)
	}
	mode, err := policy.ParseAnnotationMode(s.Agent.Annotations)
	if err != nil {
		return nil, fmt.Errorf("agent.annotations %w", err)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	a := &Agent{
		cfg: cfg,
		dir: s.Agent.Dir,
		defaults: policy.Defaults{
			Policy: s.Policy, AllowDirect: s.AllowDirect, AllowICMP: s.AllowICMP,
			ClusterDomain: s.ClusterDomain, ClusterPrefixes: slices.Concat(s.ServiceCIDRs, s.PodCIDRs),
			Annotations: mode,
		},
		metrics: NewMetrics(),
		log:     cfg.Log,
		synced:  make(chan struct{}),
		trigger: make(chan struct{}, 1),
		events:  make(chan *corev1.Event, 256),
		answers: map[string]*agentclient.Answer{},
		emitted: map[string]bool{},
		changed: make(chan struct{}),
		secrets: map[string]time.Time{},
	}
	return a, nil
}

// Metrics returns the agent's metrics.
func (a *Agent) Metrics() *Metrics { return a.metrics }

// Run runs the agent until ctx is done.
func (a *Agent) Run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(a.dir, "pods"), 0o755); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(a.dir, "secrets"), 0o700); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	// The socket first: the plugin's requests wait there until the
	// caches have synced.
	srv, err := a.serve(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	core := a.cfg.Kube.CoreV1()
	onNode := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.cfg.NodeName).String()
	}
	a.nodePods = newSource(ctx, "pods on "+a.cfg.NodeName, listWatch(core.Pods("").List, core.Pods("").Watch, onNode), &corev1.Pod{}, nil, a.poke)
	a.namespaces = newSource(ctx, "namespaces", listWatch(core.Namespaces().List, core.Namespaces().Watch, nil), &corev1.Namespace{}, nil, a.poke)
	a.nodes = newSource(ctx, "nodes", listWatch(core.Nodes().List, core.Nodes().Watch, nil), &corev1.Node{}, nil, a.poke)
	syncs := []cache.InformerSynced{a.nodePods.HasSynced, a.namespaces.HasSynced, a.nodes.HasSynced}
	// The CRDs' sources, if their resources are served; a discovery
	// that fails (the API server away) is tried again, never taken for
	// "not installed": that would drop the cluster's Deny rules.
	cnpServed, err := a.served(ctx, npa.SchemeGroupVersion.String(), "clusternetworkpolicies")
	if err != nil {
		return nil // stopped
	}
	epServed, err := a.served(ctx, v1alpha1.GroupVersion.String(), v1alpha1.Resource)
	if err != nil {
		return nil
	}
	if cnpServed {
		a.cnps = a.startCNPs(ctx)
		syncs = append(syncs, a.cnps.HasSynced)
	} else {
		a.log.Warn("not installed", "resource", "clusternetworkpolicies."+npa.GroupName+"/v1beta1", "effect", "pods get the installer's policy until it is (checked every 30 s)")
	}
	if epServed {
		a.eps = a.startEPs(ctx)
		syncs = append(syncs, a.eps.HasSynced)
	} else {
		a.log.Warn("not installed", "resource", v1alpha1.Resource+"."+v1alpha1.Group+"/"+v1alpha1.Version, "effect", "no EgressPolicy applies until it is (checked every 30 s)")
	}
	if a.cfg.MetricsAddr != "" {
		ms := &http.Server{Addr: a.cfg.MetricsAddr, Handler: promhttp.HandlerFor(a.metrics.Registry, promhttp.HandlerOpts{})}
		go func() {
			if err := ms.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error("metrics", "error", err.Error())
			}
		}()
		defer ms.Close()
	}
	go a.eventLoop(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), syncs...) {
		return nil // stopped before the caches synced
	}
	a.log.Info("synced", "node", a.cfg.NodeName)
	a.recompute(ctx)
	close(a.synced)
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	lateTick := time.NewTicker(2 * time.Second) // a late CRD's first list
	defer lateTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.trigger:
		case <-tick.C:
			a.startLateCRDs(ctx)
		case <-lateTick.C:
			if a.cnpsPending == nil && a.epsPending == nil {
				continue
			}
			a.startLateCRDs(ctx)
		}
		a.recompute(ctx)
	}
}

// served reports whether the API server serves resource in groupVersion.
// Only the API server's answer that it does not (404) is a no: any other
// error is tried again (after 1 s, then 2 s, then every 4 s, as the
// watches retry: an agent started while the API server is away starts
// within seconds of its return) until it answers or ctx is done (the
// error then).
func (a *Agent) served(ctx context.Context, groupVersion, resource string) (bool, error) {
	for delay := time.Second; ; delay = min(2*delay, 4*time.Second) {
		l, err := a.cfg.Kube.Discovery().ServerResourcesForGroupVersion(groupVersion)
		switch {
		case err == nil:
			return slices.ContainsFunc(l.APIResources, func(r metav1.APIResource) bool { return r.Name == resource }), nil
		case apierrors.IsNotFound(err):
			return false, nil
		}
		a.log.Warn("discovery", "groupVersion", groupVersion, "error", err.Error(), "retry", delay.String())
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(delay):
		}
	}
}

// startCNPs starts watching ClusterNetworkPolicies.
func (a *Agent) startCNPs(ctx context.Context) *source {
	c := a.cfg.NetworkPolicy.PolicyV1beta1().ClusterNetworkPolicies()
	return newSource(ctx, "clusternetworkpolicies", listWatch(c.List, c.Watch, nil), &npa.ClusterNetworkPolicy{}, nil, a.poke)
}

// startEPs starts watching EgressPolicies (unstructured, converted when
// read: toEgressPolicy).
func (a *Agent) startEPs(ctx context.Context) *source {
	c := a.cfg.Dynamic.Resource(v1alpha1.GroupVersionResource).Namespace(metav1.NamespaceAll)
	return newSource(ctx, v1alpha1.Resource, listWatch(c.List, c.Watch, nil), &unstructured.Unstructured{}, nil, a.poke)
}

// startLateCRDs starts watching a CRD installed after the agent
// started, and puts it to use once it has synced (so that a policy is
// never computed from part of the objects).
func (a *Agent) startLateCRDs(ctx context.Context) {
	check := func(inUse, pending **source, gv, resource string, start func(context.Context) *source) {
		switch {
		case *inUse != nil:
		case *pending != nil:
			if (*pending).HasSynced() {
				*inUse, *pending = *pending, nil
				a.log.Info("watching", "resource", resource+"."+gv, "why", "installed after the agent started")
			}
		default:
			l, err := a.cfg.Kube.Discovery().ServerResourcesForGroupVersion(gv)
			if err == nil && slices.ContainsFunc(l.APIResources, func(r metav1.APIResource) bool { return r.Name == resource }) {
				*pending = start(ctx)
			}
		}
	}
	check(&a.cnps, &a.cnpsPending, npa.SchemeGroupVersion.String(), "clusternetworkpolicies", a.startCNPs)
	check(&a.eps, &a.epsPending, v1alpha1.GroupVersion.String(), v1alpha1.Resource, a.startEPs)
}

// poke asks for a recomputation.
func (a *Agent) poke() {
	select {
	case a.trigger <- struct{}{}:
	default:
	}
}

// needsAllPods reports whether a policy has a peer that selects pods.
func needsAllPods(cnps []*npa.ClusterNetworkPolicy) bool {
	for _, c := range cnps {
		for _, r := range c.Spec.Egress {
			for _, p := range r.To {
				if p.Pods != nil || p.Namespaces != nil {
					return true
				}
			}
		}
	}
	return false
}

// snapshot is what the caches hold now; false if the cluster's pods are
// needed (a pods or namespaces peer) and not all known within 10 s.
func (a *Agent) snapshot(ctx context.Context) (*policy.Cluster, []*corev1.Pod, bool) {
	c := &policy.Cluster{Namespaces: map[string]*corev1.Namespace{}, SecretFile: a.secretFile}
	for _, o := range a.namespaces.GetStore().List() {
		n := o.(*corev1.Namespace)
		c.Namespaces[n.Name] = n
	}
	for _, o := range a.nodes.GetStore().List() {
		c.Nodes = append(c.Nodes, o.(*corev1.Node))
	}
	if a.cnps != nil {
		for _, o := range a.cnps.GetStore().List() {
			c.Policies = append(c.Policies, o.(*npa.ClusterNetworkPolicy))
		}
	}
	if a.eps != nil {
		for _, o := range a.eps.GetStore().List() {
			ep, err := toEgressPolicy(o)
			if err != nil {
				a.log.Warn("egresspolicy", "error", err.Error())
				continue
			}
			c.EgressPolicies = append(c.EgressPolicies, ep)
		}
	}
	var nodePods []*corev1.Pod
	for _, o := range a.nodePods.GetStore().List() {
		nodePods = append(nodePods, o.(*corev1.Pod))
	}
	if needsAllPods(c.Policies) {
		a.startAllPods(ctx)
		if !a.allPods.HasSynced() {
			// Until every pod is known, a Deny or Pass of a pods peer
			// would select fewer pods than it does: wider. Wait a
			// little, then give up this recomputation (the answers stay
			// as they were; the source's changes trigger another).
			wait, cancel := context.WithTimeout(ctx, 10*time.Second)
			synced := cache.WaitForCacheSync(wait.Done(), a.allPods.HasSynced)
			cancel()
			if !synced {
				return nil, nil, false
			}
		}
		for _, o := range a.allPods.GetStore().List() {
			c.Pods = append(c.Pods, o.(*corev1.Pod))
		}
	}
	return c, nodePods, true
}

// startAllPods starts watching every pod of the cluster, once; it keeps of
// each pod only what peers need.
func (a *Agent) startAllPods(ctx context.Context) {
	if a.allPods != nil {
		return
	}
	slim := func(o any) any {
		p, ok := o.(*corev1.Pod)
		if !ok {
			return o
		}
		slim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, Labels: p.Labels, ResourceVersion: p.ResourceVersion}}
		slim.Spec.HostNetwork = p.Spec.HostNetwork
		for _, c := range p.Spec.Containers {
			if len(c.Ports) > 0 {
				slim.Spec.Containers = append(slim.Spec.Containers, corev1.Container{Name: c.Name, Ports: c.Ports})
			}
		}
		slim.Status.PodIP, slim.Status.PodIPs = p.Status.PodIP, p.Status.PodIPs
		return slim
	}
	pods := a.cfg.Kube.CoreV1().Pods(metav1.NamespaceAll)
	a.allPods = newSource(ctx, "every pod", listWatch(pods.List, pods.Watch, nil), &corev1.Pod{}, slim, a.poke)
	a.log.Info("watching every pod", "why", "a ClusterNetworkPolicy has a pods or namespaces peer")
}

// toEgressPolicy converts an unstructured EgressPolicy.
func toEgressPolicy(o any) (*v1alpha1.EgressPolicy, error) {
	u, ok := o.(runtime.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected %T", o)
	}
	var ep v1alpha1.EgressPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &ep); err != nil {
		return nil, err
	}
	return &ep, nil
}

// recompute computes every pod of the node's policy, writes it, applies
// it and reports its notes.
func (a *Agent) recompute(ctx context.Context) {
	c, pods, ok := a.snapshot(ctx)
	if !ok {
		a.log.Warn("not recomputed", "why", "the cluster's pods, which a ClusterNetworkPolicy's peer selects, are not all known yet")
		return
	}
	states, err := sandbox.List(a.cfg.Settings.StateDir)
	if err != nil {
		a.log.Error("list sandboxes", "error", err.Error())
	}
	a.metrics.Sandboxes(ctx, states)
	a.refreshSecrets(ctx, c, pods)
	next := map[string]*agentclient.Answer{}
	for _, p := range pods {
		if p.Spec.HostNetwork || slices.Contains(a.cfg.Settings.ExcludeNamespaces, p.Namespace) || p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodRunning {
			continue
		}
		if c.Namespaces[p.Namespace] == nil {
			// The pod's namespace is not in the cache yet (its event
			// may come after the pod's): without its labels the policies
			// selecting it would not select the pod. No answer until it
			// is: the plugin waits, and its namespace's event recomputes.
			continue
		}
		ans := a.answer(p, c)
		id := p.Namespace + "/" + p.Name
		next[id] = ans
		a.mu.Lock()
		prev := a.answers[id]
		a.mu.Unlock()
		if prev == nil || !sameAnswer(prev, ans) {
			if err := a.writeFile(ans); err != nil {
				a.log.Error("write", "pod", id, "error", err.Error())
			}
		} else {
			ans.Computed = prev.Computed
		}
		a.apply(p, ans, states)
		a.metrics.Notes(p.Namespace, p.Name, len(ans.Notes))
	}
	a.mu.Lock()
	gone := []string{}
	for id := range a.answers {
		if next[id] == nil {
			gone = append(gone, id)
		}
	}
	a.answers = next
	close(a.changed)
	a.changed = make(chan struct{})
	a.mu.Unlock()
	for _, id := range gone {
		ns, name, _ := strings.Cut(id, "/")
		os.Remove(agentclient.PodFile(a.dir, ns, name))
		a.metrics.Forget(ns, name)
	}
}

// answer computes pod's answer.
func (a *Agent) answer(p *corev1.Pod, c *policy.Cluster) *agentclient.Answer {
	ans := &agentclient.Answer{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Computed: time.Now().UTC()}
	res, err := policy.Compute(p, c, a.defaults)
	if err != nil {
		ans.Error = err.Error()
		return ans
	}
	ans.Policy, ans.AllowDirect, ans.AllowICMP, ans.RuleSets, ans.Sources = res.Policy, res.AllowDirect, res.AllowICMP, res.RuleSets, res.Sources
	for _, n := range res.Notes {
		ans.Notes = append(ans.Notes, n.Object.String()+": "+n.Message)
		a.event(n, p)
	}
	return ans
}

// sameAnswer reports whether a and b say the same, whenever computed.
func sameAnswer(a, b *agentclient.Answer) bool {
	x, y := *a, *b
	x.Computed, y.Computed = time.Time{}, time.Time{}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// writeFile writes ans where the CNI plugin falls back to it.
func (a *Agent) writeFile(ans *agentclient.Answer) error {
	data, err := json.MarshalIndent(ans, "", "  ")
	if err != nil {
		return err
	}
	path := agentclient.PodFile(a.dir, ans.Namespace, ans.Name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, bytes.NewReader(append(data, '\n')), atomicfile.Options{Perm: 0o644})
}

// apply puts ans in force on p's live sandbox, if it has one: its policy
// (sandbox.UpdatePolicy) and, where they changed, its allowDirect
// destinations and ICMP (sandbox.UpdateDirect). Each sandbox counts one
// application: an error if either failed, applied if either changed
// something.
func (a *Agent) apply(p *corev1.Pod, ans *agentclient.Answer, states []*sandbox.State) {
	if ans.Policy == nil {
		return // the pod is refused; its running sandbox keeps its policy
	}
	id := p.Namespace + "/" + p.Name
	for _, s := range states {
		if s.Runtime != "cni" || s.ID != id || s.Unenforced != "" || (s.PodUID != "" && s.PodUID != string(p.UID)) {
			continue
		}
		failed, changed := false, false
		u, err := sandbox.UpdatePolicy(a.cfg.Settings.StateDir, s.Key, ans.Policy)
		switch {
		case err != nil:
			failed = true
			a.log.Error("apply", "pod", id, "sandbox", s.Key, "error", err.Error())
		case u.Changed:
			changed = true
			a.log.Info("applied", "pod", id, "sandbox", s.Key, "policy", ans.Policy.String())
		}
		if !slices.Equal(s.AllowDirect, ans.AllowDirect) || s.AllowICMP != ans.AllowICMP {
			// Tried whether or not the policy went in: a narrower
			// allowDirect must not wait for it.
			u, err := sandbox.UpdateDirect(a.cfg.Settings.StateDir, s.Key, ans.AllowDirect, ans.AllowICMP)
			switch {
			case err != nil:
				failed = true
				a.log.Error("apply", "pod", id, "sandbox", s.Key, "what", "allowDirect and ICMP", "error", err.Error())
			case u.Changed:
				changed = true
				a.log.Info("applied", "pod", id, "sandbox", s.Key, "allowDirect", conf.JoinDirect(ans.AllowDirect), "allowICMP", ans.AllowICMP)
				for _, n := range u.Notes {
					a.log.Warn("applied", "pod", id, "sandbox", s.Key, "what", "allowDirect and ICMP", "note", n)
				}
			}
		}
		switch {
		case failed:
			a.metrics.Applied(p.Namespace, p.Name, "error")
		case changed:
			a.metrics.Applied(p.Namespace, p.Name, "applied")
		default:
			a.metrics.Applied(p.Namespace, p.Name, "unchanged")
		}
	}
}

// secretFile is where the value of key of Secret namespace/name goes.
func (a *Agent) secretFile(namespace, name, key string) string {
	return filepath.Join(a.dir, "secrets", namespace, name, key)
}

// refreshSecrets writes the Secret keys the node's pods' EgressPolicies
// name (read at most every 30 s; a key that cannot be read is removed, so
// that the pods that need it are refused rather than sent without it).
func (a *Agent) refreshSecrets(ctx context.Context, c *policy.Cluster, pods []*corev1.Pod) {
	type ref struct{ ns, name, key string }
	want := map[ref]bool{}
	for _, ep := range c.EgressPolicies {
		sel, err := metav1.LabelSelectorAsSelector(&ep.Spec.PodSelector)
		if err != nil {
			continue
		}
		if !slices.ContainsFunc(pods, func(p *corev1.Pod) bool {
			return p.Namespace == ep.Namespace && sel.Matches(labels.Set(p.Labels))
		}) {
			continue
		}
		for _, h := range ep.Spec.Inspect {
			for _, in := range h.Inject {
				want[ref{ep.Namespace, in.SecretKeyRef.Name, in.SecretKeyRef.Key}] = true
			}
		}
	}
	for r := range want {
		path := a.secretFile(r.ns, r.name, r.key)
		if t, ok := a.secrets[path]; ok && time.Since(t) < 30*time.Second {
			continue
		}
		sec, err := a.cfg.Kube.CoreV1().Secrets(r.ns).Get(ctx, r.name, metav1.GetOptions{})
		var val []byte
		if err == nil {
			v, ok := sec.Data[r.key]
			if !ok {
				err = fmt.Errorf("secret %s/%s has no key %q", r.ns, r.name, r.key)
			}
			val = v
		}
		if err != nil {
			if apierrors.IsNotFound(err) || strings.Contains(err.Error(), "no key") {
				os.Remove(path)
			}
			a.log.Warn("secret", "secret", r.ns+"/"+r.name, "key", r.key, "error", err.Error())
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err == nil {
			err = atomicfile.Write(path, bytes.NewReader(val), atomicfile.Options{Perm: 0o600})
		}
		if err != nil {
			a.log.Error("secret", "file", path, "error", err.Error())
			continue
		}
		a.secrets[path] = time.Now()
	}
	for path := range a.secrets {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(want)), func(r ref) bool { return a.secretFile(r.ns, r.name, r.key) == path }) {
			os.Remove(path)
			delete(a.secrets, path)
		}
	}
}

// event reports note as an Event on the object it is about and on the
// node, once (the name is a hash of what it says).
func (a *Agent) event(n policy.Note, p *corev1.Pod) {
	involved := corev1.ObjectReference{Kind: n.Object.Kind, Name: n.Object.Name, Namespace: n.Object.Namespace}
	switch n.Object.Kind {
	case policy.KindClusterNetworkPolicy:
		involved.APIVersion = npa.SchemeGroupVersion.String()
	case policy.KindEgressPolicy:
		involved.APIVersion = v1alpha1.GroupVersion.String()
	case policy.KindPod:
		involved.APIVersion, involved.UID = "v1", p.UID
	}
	node := corev1.ObjectReference{Kind: "Node", Name: a.cfg.NodeName, APIVersion: "v1", UID: ""}
	for _, obj := range []corev1.ObjectReference{involved, node} {
		msg := n.Message
		if obj.Kind == "Node" {
			msg = "pod " + p.Namespace + "/" + p.Name + ": " + n.Object.String() + ": " + n.Message
		}
		ns := obj.Namespace
		if ns == "" {
			ns = metav1.NamespaceDefault
		}
		sum := sha256.Sum256([]byte(a.cfg.NodeName + "\x00" + obj.Kind + "\x00" + obj.Namespace + "\x00" + obj.Name + "\x00" + msg))
		name := strings.ToLower(obj.Name) + ".doorman-" + hex.EncodeToString(sum[:8])
		if len(name) > 253 {
			name = name[len(name)-253:]
		}
		a.mu.Lock()
		done := a.emitted[name]
		a.emitted[name] = true
		a.mu.Unlock()
		if done {
			continue
		}
		if len(msg) > 1024 {
			msg = msg[:1021] + "..."
		}
		now := metav1.Now()
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: ns},
			InvolvedObject: obj,
			Reason:         "PolicyNotExact",
			Message:        msg,
			Type:           corev1.EventTypeWarning,
			Source:         corev1.EventSource{Component: "doorman-agent", Host: a.cfg.NodeName},
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
			ReportingController: "doorman.io/agent", ReportingInstance: "doorman-agent-" + a.cfg.NodeName,
		}
		select {
		case a.events <- ev:
		default:
			// The queue is full (the API server is slow or away): the
			// next recomputation tries again.
			a.mu.Lock()
			delete(a.emitted, name)
			a.mu.Unlock()
		}

	}
}

// eventLoop creates the queued Events, so that recomputing never waits
// for the API server.
func (a *Agent) eventLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-a.events:
			_, err := a.cfg.Kube.CoreV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				a.log.Warn("event", "object", ev.InvolvedObject.Kind+" "+ev.InvolvedObject.Name, "error", err.Error())
				a.mu.Lock()
				delete(a.emitted, ev.Name)
				a.mu.Unlock()
			}
		}
	}
}

// serve answers the CNI plugin on the agent's socket.
func (a *Agent) serve(ctx context.Context) (*http.Server, error) {
	sock := filepath.Join(a.dir, agentclient.SocketName)
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("agent: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/pods/{namespace}/{name}", a.handlePod)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(l)
	return srv, nil
}

// handlePod answers with a pod's policy, waiting up to ?wait= (at most a
// minute) for the caches to sync and for the pod to be seen.
func (a *Agent) handlePod(w http.ResponseWriter, r *http.Request) {
	ns, name, uid := r.PathValue("namespace"), r.PathValue("name"), r.URL.Query().Get("uid")
	wait, err := time.ParseDuration(r.URL.Query().Get("wait"))
	if err != nil || wait <= 0 || wait > time.Minute {
		wait = 5 * time.Second
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-a.synced:
	case <-timer.C:
		http.Error(w, "the agent's caches have not synced with the API server yet", http.StatusServiceUnavailable)
		return
	case <-r.Context().Done():
		return
	}
	for {
		a.mu.Lock()
		ans, changed := a.answers[ns+"/"+name], a.changed
		a.mu.Unlock()
		if ans != nil && (uid == "" || ans.UID == uid) {
			w.Header().Set("Content-Type", "application/json")
			if ans.Error != "" {
				w.WriteHeader(http.StatusUnprocessableEntity)
			}
			json.NewEncoder(w).Encode(ans)
			return
		}
		a.poke()
		select {
		case <-changed:
		case <-timer.C:
			http.Error(w, fmt.Sprintf("pod %s/%s (uid %s) not seen on node %s", ns, name, uid, a.cfg.NodeName), http.StatusNotFound)
			return
		case <-r.Context().Done():
			return
		}
	}
}
