package hostlayer

import "testing"

// BenchmarkApplyBridged is what the layer costs a sandbox on a bridge:
// Apply, Check and Remove of one sandbox's layer on its bridge port,
// beside another sandbox whose layer stays (so the shared skeleton is
// there, as on a host with sandboxes, and Apply compares it rather than
// sending it). Apply includes turning on the port's isolation, Remove
// turning it off.
func BenchmarkApplyBridged(b *testing.B) {
	requireRoot(b)
	l := newLab(b)
	l.apply(b, l.spec(b, "ctr-b", l.b, "veth-b", false))
	s := l.spec(b, "ctr-a", l.a, "veth-a", false)
	steps := []struct {
		name string
		fn   func() error
	}{
		{"apply", func() error { _, err := Apply(l.runtime.path, s); return err }},
		{"check", func() error { return Check(l.runtime.path, s) }},
		{"remove", func() error { return Remove(l.runtime.path, s.Key) }},
	}
	for _, step := range steps {
		b.Run(step.name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				// Each step starts from the state the one before leaves.
				for _, before := range steps {
					if before.name == step.name {
						break
					}
					if err := before.fn(); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				if err := step.fn(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if step.name != "remove" {
					if err := Remove(l.runtime.path, s.Key); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
		})
	}
}
