package sandbox

import (
	"fmt"

	"github.com/doorman-net/doorman/hostconf"
)

// CompleteHostLayer adds the host-side layer to sandbox key under stateDir
// when it was asked for but could not be installed when the sandbox was
// enforced, because the sandbox had no interface yet: Docker >= 28 adds a
// container's veth after the createRuntime hook, and the runc wrapper calls
// this when the engine runs `runc start`, by which time the network is in
// place. The host-side interfaces are looked up once; a sandbox that still
// has none (--network none) keeps its label. It returns the state as it is
// afterwards; a sandbox with the layer in place, or that never asked for
// it, is left as it is.
func CompleteHostLayer(stateDir, key string) (*State, error) {
	if stateDir == "" {
		stateDir = hostconf.DefaultStateDir
	}
	// Most containers need nothing: say so without taking the lock,
	// which every `runc start` would otherwise wait on.
	if s, err := Load(stateDir, key); err != nil || !s.Spec.HostLayer || s.HostLayer {
		if err != nil {
			return nil, fmt.Errorf("host-side layer of sandbox %s: %w", key, err)
		}
		return s, nil
	}
	unlock, err := lockDir(stateDir)
	if err != nil {
		return nil, fmt.Errorf("host-side layer of sandbox %s: %w", key, err)
	}
	defer unlock()
	s, err := Load(stateDir, key)
	if err != nil {
		return nil, fmt.Errorf("host-side layer of sandbox %s: %w", key, err)
	}
	if !s.Spec.HostLayer || s.HostLayer {
		return s, nil
	}
	if err := s.applyHostLayer(nil, nil); err != nil {
		return nil, fmt.Errorf("host-side layer of sandbox %s: %w", key, err)
	}
	if !s.HostLayer {
		return s, nil // still no interface: nothing changed
	}
	if err := s.save(); err != nil {
		return nil, fmt.Errorf("host-side layer of sandbox %s: %w", key, err)
	}
	return s, nil
}
