package main

import "testing"

func TestShortID(t *testing.T) {
	for id, want := range map[string]string{
		"3f4e1c2b9a8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f": "3f4e1c2b9a8d",
		"aaa111":         "aaa111",
		"build-worker-1": "build-worker-1", // a runc id: whole, or two would look alike
		"3F4E1C2B9A8D7E": "3F4E1C2B9A8D7E",
		"default-3f4e1c2b9a8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f": "default-3f4e1c2b9a8d", // nerdctl's
		"default-3f4e": "default-3f4e",
	} {
		if got := shortID(id); got != want {
			t.Errorf("shortID(%q) = %q, want %q", id, got, want)
		}
	}
}
