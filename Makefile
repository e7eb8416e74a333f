# doorman: build, test, install. Tests need root (they create network
# namespaces and nftables rules); see README.md.

GO          ?= go
PREFIX      ?= /usr/local
CNI_BIN_DIR ?= /opt/cni/bin
HOOKS_DIR   ?= /usr/share/containers/oci/hooks.d
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GOFLAGS_BUILD = -trimpath -ldflags "-s -w -X main.version=$(VERSION)"
FUZZTIME    ?= 20s
CNI_PLUGINS = github.com/containernetworking/plugins/plugins/main/bridge \
              github.com/containernetworking/plugins/plugins/ipam/host-local \
              github.com/containernetworking/plugins/plugins/main/loopback

.PHONY: all build test test-all vet fuzz bench install uninstall clean image crds

all: build

# bin/doorman and, next to it, the reference CNI plugins `doorman run` chains
# (built from the containernetworking/plugins version in go.mod).
build:
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o bin/doorman ./cmd/doorman
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o bin/doorman-agent ./cmd/doorman-agent
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o bin/ $(CNI_PLUGINS)

# bin/doorman-image.tar: the DaemonSet's image (deploy/kubernetes), an OCI
# archive with one layer, /doorman and /doorman-agent (the node agent),
# made by deploy/kubernetes/mkimage: no
# container engine, no registry, no network. Load it on a node with
# `ctr -n k8s.io images import bin/doorman-image.tar` (or `podman load -i`).
IMAGE ?= localhost/doorman:latest
image: build
	$(GO) run ./deploy/kubernetes/mkimage -binary bin/doorman -agent bin/doorman-agent -name $(IMAGE) -version $(VERSION) -o bin/doorman-image.tar

# bin/crds/: the ClusterNetworkPolicy CRD (the experimental channel, which
# has domainNames) from the sigs.k8s.io/network-policy-api module in
# go.mod (Apache-2.0), for `kubectl apply -f bin/crds/`.
crds:
	mkdir -p bin/crds
	cp "$$($(GO) list -m -f '{{.Dir}}' sigs.k8s.io/network-policy-api)/config/crd/experimental/policy.networking.k8s.io_clusternetworkpolicies.yaml" bin/crds/
	chmod 0644 bin/crds/*.yaml

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...

# The whole suite: unit tests, fuzz seed corpora, and the end-to-end tests
# against real namespaces and runtimes. Run as root.
test: vet
	$(GO) test -count=1 -timeout 50m ./...

# The README's command for a fresh machine: installs what the tests need
# (apt packages, nerdctl, crictl, containerd 2, the vendors' API clients,
# the Kubernetes cluster's binaries; each cached, so a rerun installs
# nothing), starts the system's dockerd, then runs `make test`. It is what
# CI runs. Debian 12, as root, with Go at /usr/local/go/bin.
test-all:
	.ci/run

# Short coverage-guided fuzzing of every parser (seed corpora live in
# */testdata/fuzz and run as part of `make test`).
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzParseEntry$$' -fuzztime=$(FUZZTIME) ./conf
	$(GO) test -run='^$$' -fuzz='^FuzzParseJSON$$' -fuzztime=$(FUZZTIME) ./conf
	$(GO) test -run='^$$' -fuzz='^FuzzParseFile$$' -fuzztime=$(FUZZTIME) ./conf
	$(GO) test -run='^$$' -fuzz='^FuzzParseDirect$$' -fuzztime=$(FUZZTIME) ./conf
	$(GO) test -run='^$$' -fuzz='^FuzzInspectLine$$' -fuzztime=$(FUZZTIME) ./conf
	$(GO) test -run='^$$' -fuzz='^FuzzParseRuleSetList$$' -fuzztime=$(FUZZTIME) ./conf
	$(GO) test -run='^$$' -fuzz='^FuzzJSONPath$$' -fuzztime=$(FUZZTIME) ./conf
	$(GO) test -run='^$$' -fuzz='^FuzzStrictJSON$$' -fuzztime=$(FUZZTIME) ./conf
	$(GO) test -run='^$$' -fuzz='^FuzzSpelling$$' -fuzztime=$(FUZZTIME) ./conf
	$(GO) test -run='^$$' -fuzz='^FuzzQueryKey$$' -fuzztime=$(FUZZTIME) ./conf
	$(GO) test -run='^$$' -fuzz='^FuzzRuleSetJudge$$' -fuzztime=$(FUZZTIME) ./conf
	$(GO) test -run='^$$' -fuzz='^FuzzParseRuleSet$$' -fuzztime=$(FUZZTIME) ./conf
	$(GO) test -run='^$$' -fuzz='^FuzzRuleSetOnePass$$' -fuzztime=$(FUZZTIME) ./conf
	$(GO) test -run='^$$' -fuzz='^FuzzJSONScanner$$' -fuzztime=$(FUZZTIME) ./proxy/inspect
	$(GO) test -run='^$$' -fuzz='^FuzzTripwire$$' -fuzztime=$(FUZZTIME) ./proxy/inspect
	$(GO) test -run='^$$' -fuzz='^FuzzServerName$$' -fuzztime=$(FUZZTIME) ./proxy/sniff
	$(GO) test -run='^$$' -fuzz='^FuzzParseFlow$$' -fuzztime=$(FUZZTIME) ./proxy/droplog
	$(GO) test -run='^$$' -fuzz='^FuzzParseMessage$$' -fuzztime=$(FUZZTIME) ./proxy/droplog/nflog
	$(GO) test -run='^$$' -fuzz='^FuzzParseRequestHead$$' -fuzztime=$(FUZZTIME) ./proxy/sniff
	$(GO) test -run='^$$' -fuzz='^FuzzRequestReader$$' -fuzztime=$(FUZZTIME) ./proxy/sniff
	$(GO) test -run='^$$' -fuzz='^FuzzFilterQuery$$' -fuzztime=$(FUZZTIME) ./proxy/dnsfilter
	$(GO) test -run='^$$' -fuzz='^FuzzParseServer$$' -fuzztime=$(FUZZTIME) ./proxy/resolver
	$(GO) test -run='^$$' -fuzz='^FuzzResponseReader$$' -fuzztime=$(FUZZTIME) ./proxy/sniff
	$(GO) test -run='^$$' -fuzz='^FuzzJSONHandler$$' -fuzztime=$(FUZZTIME) ./proxy/decisionlog
	$(GO) test -run='^$$' -fuzz='^FuzzValidateConfig$$' -fuzztime=$(FUZZTIME) ./cniinstall
	$(GO) test -run='^$$' -fuzz='^FuzzDecode$$' -fuzztime=$(FUZZTIME) ./internal/strictjson
	$(GO) test -run='^$$' -fuzz='^FuzzWithEntry$$' -fuzztime=$(FUZZTIME) ./cniinstall
	$(GO) test -run='^$$' -fuzz='^FuzzDecode$$' -fuzztime=$(FUZZTIME) ./proxy/launch
	$(GO) test -run='^$$' -fuzz='^FuzzPolicy$$' -fuzztime=$(FUZZTIME) ./annotation
	$(GO) test -run='^$$' -fuzz='^FuzzParseEntry$$' -fuzztime=$(FUZZTIME) ./plugin
	$(GO) test -run='^$$' -fuzz='^FuzzParseRuntimeConfig$$' -fuzztime=$(FUZZTIME) ./plugin
	$(GO) test -run='^$$' -fuzz='^FuzzParseLimits$$' -fuzztime=$(FUZZTIME) ./spec
	$(GO) test -run='^$$' -fuzz='^FuzzParsePath$$' -fuzztime=$(FUZZTIME) ./cgroup
	$(GO) test -run='^$$' -fuzz='^FuzzParseMountinfo$$' -fuzztime=$(FUZZTIME) ./cgroup
	$(GO) test -run='^$$' -fuzz='^FuzzParseCgroupLimits$$' -fuzztime=$(FUZZTIME) ./spec
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeReply$$' -fuzztime=$(FUZZTIME) ./proxy/internal/realdst

# Benchmarks print tables; they are never pass/fail. Run as root. The
# relay benchmark compares doorman with Debian's HAProxy and Squid
# (squid-openssl), the inspection benchmark with Squid's ssl_bump and
# mitmproxy, installed here if missing, without starting their system
# services (a policy-rc.d that refuses, removed afterwards if it was ours);
# a peer that still cannot be installed is skipped, with a line saying so.
bench:
	@command -v haproxy >/dev/null 2>&1 && command -v squid >/dev/null 2>&1 && command -v mitmdump >/dev/null 2>&1 || { \
		ours=; if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; ours=1; fi; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy squid-openssl mitmproxy; } || echo "bench: could not install haproxy/squid-openssl/mitmproxy: those paths will be skipped"; \
		if [ -n "$$ours" ]; then rm -f /usr/sbin/policy-rc.d; fi; \
		for s in haproxy squid; do \
			if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet $$s 2>/dev/null; then systemctl disable --now $$s; fi; \
			if pidof -q $$s && [ -x /etc/init.d/$$s ]; then /etc/init.d/$$s stop; fi; \
		done; true; }
	$(GO) test -run='^$$' -bench=. -benchmem ./proxy/sniff
	$(GO) test -run='^$$' -bench=. -benchtime=30x ./enforce/hostlayer
	$(GO) test -run='^$$' -bench=. -benchtime=1x -timeout 30m ./integration

# The binary; its CNI plugin name in CNI_BIN_DIR; doorman-runtime, the runc
# wrapper for dockerd's daemon.json; and the OCI hooks for Podman and CRI-O
# (applied to containers that carry the doorman.io/mode annotation).
install: build
	install -D -m 0755 bin/doorman $(DESTDIR)$(PREFIX)/bin/doorman
	ln -sf doorman $(DESTDIR)$(PREFIX)/bin/doorman-runtime
	install -d $(DESTDIR)$(CNI_BIN_DIR) $(DESTDIR)$(HOOKS_DIR)
	ln -sf $(PREFIX)/bin/doorman $(DESTDIR)$(CNI_BIN_DIR)/doorman
	for f in hook/hooks.d/*.json; do \
		sed 's#/usr/local/bin/doorman#$(PREFIX)/bin/doorman#' $$f > $(DESTDIR)$(HOOKS_DIR)/$$(basename $$f); \
	done
	install -d $(DESTDIR)$(PREFIX)/lib/doorman/cni
	install -m 0755 bin/bridge bin/host-local bin/loopback $(DESTDIR)$(PREFIX)/lib/doorman/cni/

# The README's first command: builds everything, then shows `doorman run`
# allowing one site and refusing another, in a fake internet made of
# throwaway network namespaces (nothing leaves the machine). Needs root.
# Regenerates docs/security.md from the escape suite (root, Docker needed).
.PHONY: security-doc
security-doc:
	DOORMAN_WRITE_SECURITY_DOC=1 $(GO) test -count=1 -run '^TestEscape$$' ./integration

.PHONY: demo
demo: build
	CGO_ENABLED=0 $(GO) build -o bin/doorman-demo ./integration/demo
	bin/doorman-demo --doorman bin/doorman

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/doorman $(DESTDIR)$(PREFIX)/bin/doorman-runtime $(DESTDIR)$(CNI_BIN_DIR)/doorman
	rm -f $(DESTDIR)$(HOOKS_DIR)/doorman-create.json $(DESTDIR)$(HOOKS_DIR)/doorman-poststop.json
	rm -f $(DESTDIR)$(PREFIX)/lib/doorman/cni/bridge $(DESTDIR)$(PREFIX)/lib/doorman/cni/host-local $(DESTDIR)$(PREFIX)/lib/doorman/cni/loopback
	-rmdir $(DESTDIR)$(PREFIX)/lib/doorman/cni $(DESTDIR)$(PREFIX)/lib/doorman

clean:
	rm -rf bin
