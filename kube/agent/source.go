package agent

import (
	"context"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// watchBackoff is how the agent's reflectors wait before they list or
// watch again after the API server failed them (refused the connection,
// answered 5xx or 429): 400 ms, doubling up to 2 s, each wait jittered up
// to twice as long, so at most 4 s; reset after 2 minutes without
// failures (client-go's reset). client-go's shared informers wait 800 ms
// doubling up to 30 s (jittered: up to a minute), which after an API
// server restart of some seconds left the agent blind to changes for 20
// to 40 s: a node agent, whose pods' policy must follow the cluster
// within seconds, retries sooner. The cost, while the API server is away:
// one refused connection every 2 to 4 s per watched resource (five at
// most) on each node. SharedInformerFactory does not take a backoff
// (client-go #136943), hence the agent's own reflectors (source).
var watchBackoff = wait.Backoff{Duration: 400 * time.Millisecond, Factor: 2, Jitter: 1, Steps: 5, Cap: 2 * time.Second}

// source is one resource the agent watches: client-go's Reflector (its
// list, watch and resume from the last resource version, with
// watchBackoff) keeping a Store, that calls changed after every change
// the Store takes. It stands where a SharedIndexInformer with one event
// handler would, without the informer's queue and processor: the agent
// only reads the Store and recomputes on any change.
type source struct {
	store     cache.Store
	synced    atomic.Bool
	changed   func()
	transform func(any) any // nil: objects are kept as they come
}

// newSource starts a reflector of lw (objects of expected's type) into a
// new source, until ctx is done; changed is called after every change.
func newSource(ctx context.Context, name string, lw cache.ListerWatcher, expected runtime.Object, transform func(any) any, changed func()) *source {
	s := &source{store: cache.NewStore(cache.MetaNamespaceKeyFunc), changed: changed, transform: transform}
	backoff := watchBackoff
	r := cache.NewReflectorWithOptions(lw, expected, s, cache.ReflectorOptions{Name: name, Backoff: &backoff})
	go r.RunWithContext(ctx)
	return s
}

// listWatch is a ListerWatcher of a client's List and Watch, with mod
// applied to the options of both (a field selector).
func listWatch[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error), w func(context.Context, metav1.ListOptions) (watch.Interface, error), mod func(*metav1.ListOptions)) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if mod != nil {
				mod(&o)
			}
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if mod != nil {
				mod(&o)
			}
			return w(ctx, o)
		},
	}
}

// HasSynced reports whether the first list is in the Store.
func (s *source) HasSynced() bool { return s.synced.Load() }

// GetStore is the source's Store, for reading.
func (s *source) GetStore() cache.Store { return s.store }

func (s *source) tr(o any) any {
	if s.transform == nil {
		return o
	}
	return s.transform(o)
}

// Add is the reflector's (cache.ReflectorStore).
func (s *source) Add(o any) error {
	err := s.store.Add(s.tr(o))
	s.changed()
	return err
}

// Update is the reflector's (cache.ReflectorStore).
func (s *source) Update(o any) error {
	err := s.store.Update(s.tr(o))
	s.changed()
	return err
}

// Delete is the reflector's (cache.ReflectorStore).
func (s *source) Delete(o any) error {
	err := s.store.Delete(o)
	s.changed()
	return err
}

// Replace is the reflector's (cache.ReflectorStore): a (re)list.
func (s *source) Replace(list []any, resourceVersion string) error {
	for i := range list {
		list[i] = s.tr(list[i])
	}
	err := s.store.Replace(list, resourceVersion)
	if err == nil {
		s.synced.Store(true)
	}
	s.changed()
	return err
}

// Resync is the reflector's (cache.ReflectorStore): nothing to do.
func (s *source) Resync() error { return nil }
