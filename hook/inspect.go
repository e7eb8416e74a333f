package hook

import (
	"cmp"
	"fmt"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/doorman-net/doorman/annotation"
	"github.com/doorman-net/doorman/ca"
	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/hostconf"
)

// AnnotationInspect carries request rules (the JSON form of the inspect
// key, see conf.ParseInspectRules) as an annotation or, on Docker, a
// label: {"api.example.com": {"deny": [...], "inject": [...]},
// "rulesets": ["closed-book"]}. They replace the rules of the policy the
// other annotations, or the default policy file, give; its "rulesets"
// key, when it is there, replaces the policy's rule sets (as the
// doorman.io/rulesets annotation does: one of the two, not both).
const AnnotationInspect = "doorman.io/inspect"

// hookCAName names the CA of the containers the hook enforces: one
// network, the hook's, whatever runtime started them.
const hookCAName = "hook"

// caDirFor is the hook's network's CA directory under root (default
// hostconf.DefaultCADir).
func caDirFor(root string) string {
	return filepath.Join(cmp.Or(root, hostconf.DefaultCADir), hookCAName)
}

// withInspectAnnotation puts the request rules of the inspect annotation,
// if there is one, and the rule sets of it or of the rulesets annotation
// in p.
func withInspectAnnotation(p *conf.Policy, annotations map[string]string) (*conf.Policy, error) {
	v, ok := annotations[AnnotationInspect]
	if !ok {
		return annotation.WithRuleSets(p, annotations)
	}
	rules, err := conf.ParseInspectRules([]byte(v))
	if err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationInspect, err)
	}
	q, err := p.WithInspect(rules.Hosts)
	if err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationInspect, err)
	}
	if !rules.HasRuleSets {
		return annotation.WithRuleSets(q, annotations)
	}
	if _, both := annotations[annotation.RuleSets]; both {
		return nil, fmt.Errorf("annotation %s: rulesets: the %s annotation names rule sets too; give them in one of the two", AnnotationInspect, annotation.RuleSets)
	}
	if q, err = q.WithRuleSets(rules.RuleSets); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationInspect, err)
	}
	return q, nil
}

// trustedBundlePath is where a container finds its trust bundle (and
// what the bundle environment variables name): the first of
// ca.SystemBundlePaths, mounted whether the image has it or not.
var trustedBundlePath = ca.SystemBundlePaths[0]

// addTrust makes a container whose policy inspects hosts trust the
// network's CA: it makes sure the CA vouches for those hosts, registers a
// bundle of the image's own system bundle plus the CA for the container,
// mounts it read-only over each standard bundle path the image has (and
// the first one always), and points SSL_CERT_FILE, NODE_EXTRA_CA_CERTS,
// REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE at it. The CA's key stays on the
// host.
func addTrust(raw map[string]any, spec *specs.Spec, bundle, id string, pol *conf.Policy, caRoot string) error {
	if !pol.HasInspection() {
		return nil
	}
	dir := caDirFor(caRoot)
	if _, err := ca.Ensure(dir, pol.InspectedHosts()); err != nil {
		return fmt.Errorf("request rules: the network's CA: %w", err)
	}
	rootfs := "rootfs"
	if spec.Root != nil && spec.Root.Path != "" {
		rootfs = spec.Root.Path
	}
	if !filepath.IsAbs(rootfs) {
		rootfs = filepath.Join(bundle, rootfs)
	}
	path, err := ca.WriteBundle(dir, Key(id), ca.ReadSystemBundle(rootfs))
	if err != nil {
		return err
	}
	mounts, _ := raw["mounts"].([]any)
	for _, dst := range ca.ExistingBundlePaths(rootfs) {
		mounts = append(mounts, map[string]any{
			"destination": dst, "type": "bind", "source": path, "options": []any{"rbind", "ro", "nosuid", "nodev", "noexec"},
		})
	}
	raw["mounts"] = mounts
	for _, k := range ca.BundleEnv {
		setEnv(raw, k, trustedBundlePath)
	}
	return nil
}
